package gateway

import (
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/quotagate/quotagate/usage"
)

// Bounds of the body buffer budget sized from the memory limit (see
// config.Server.BodyBufferBytes): an eighth of the limit, and without a
// limit defaultBodyBudget.
const (
	defaultBodyBudget = 64 << 20
	minBodyBudget     = 4 << 20
)

// newBodyBudget returns the gateway-wide budget of buffered body bytes:
// configured bytes, or when 0 an eighth of the memory limit in force (the
// runtime's, from GOMEMLIMIT, else the cgroup's memory.max), at least
// minBodyBudget, and defaultBodyBudget without a limit.
func newBodyBudget(configured int64) *usage.Budget {
	if configured > 0 {
		return usage.NewBudget(configured)
	}
	limit := debug.SetMemoryLimit(-1)
	if limit == math.MaxInt64 {
		limit = cgroupMemoryMax("/sys/fs/cgroup/memory.max")
	}
	if limit <= 0 || limit == math.MaxInt64 {
		return usage.NewBudget(defaultBodyBudget)
	}
	return usage.NewBudget(max(limit/8, minBodyBudget))
}

// cgroupMemoryMax reads a cgroup v2 memory.max file: its limit in bytes,
// or 0 when the file is missing or says "max" (no limit).
func cgroupMemoryMax(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	return n
}
