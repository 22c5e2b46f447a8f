package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"github.com/quotagate/quotagate/internal/gcfloor"
)

// Memory defaults applied when the process runs under a cgroup v2 memory
// limit (a container's) and the environment does not decide otherwise.
const (
	// memLimitPercent is the share of the cgroup's memory.max given to
	// the Go runtime as its soft memory limit (GOMEMLIMIT), leaving the
	// rest for memory the runtime does not count (thread stacks, cgo,
	// the kernel's page cache charged to the cgroup).
	memLimitPercent = 90
	// limitedGOGC is the GC percent used under such a limit (GOGC's
	// default is 100): the memory limit, not the heap's growth, then
	// bounds memory, so the collector may run half as often.
	limitedGOGC = 200
)

// memDefaults is what applyMemoryDefaults sets; a zero field is left
// alone.
type memDefaults struct {
	limit int64 // bytes for debug.SetMemoryLimit
	gogc  int   // percent for debug.SetGCPercent
	// floor is the heap floor for gcfloor.Start (0 = none), before the cap
	// by a GOMEMLIMIT from the environment, which applyMemoryDefaults
	// applies.
	floor int64
	// why says where limit came from, for the startup log.
	why string
}

// memoryDefaults works out the runtime memory settings: GOMEMLIMIT at
// memLimitPercent of this process's cgroup memory limit (v2 memory.max, or
// v1 memory.limit_in_bytes) when GOMEMLIMIT is not set, and GOGC at limitedGOGC when GOGC is not set and a memory
// limit is in force (GOMEMLIMIT's or the cgroup's), and, when GOGC is not
// set, a heap floor of floor bytes (server.heap_floor_bytes; 0: none), at
// most a quarter of the cgroup's limit. It reads
// /proc/self/cgroup and /sys/fs/cgroup/<path>/memory.max from root (the
// real root in production, a fake tree in tests), falling back to
// /sys/fs/cgroup/memory.max, and the v1 files likewise (see
// readMemoryMax). No cgroup, no limit file or an unlimited one means no
// cgroup limit and no error; an unreadable or malformed limit file is an
// error, and nothing is changed.
func memoryDefaults(root fs.FS, getenv func(string) (string, bool), floor int64) (memDefaults, error) {
	_, haveLimit := getenv("GOMEMLIMIT")
	_, haveGOGC := getenv("GOGC")
	var d memDefaults
	if !haveGOGC {
		d.floor = max(floor, 0)
	}
	if !haveLimit {
		file, raw, err := readMemoryMax(root)
		if err != nil {
			return memDefaults{}, err
		}
		if raw == "" || raw == "max" {
			return d, nil // no limit: only the floor
		}
		max, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || max <= 0 {
			return memDefaults{}, fmt.Errorf("%s: %q is not a byte count or \"max\"", file, raw)
		}
		d.limit = max / 100 * memLimitPercent
		d.why = fmt.Sprintf("%d%% of %s (%d bytes)", memLimitPercent, file, max)
		if d.floor > d.limit/4 {
			d.floor = d.limit / 4
		}
	}
	if !haveGOGC {
		d.gogc = limitedGOGC
	}
	return d, nil
}

// applyMemoryDefaults applies memoryDefaults for this process, with a heap
// floor of floor bytes (server.heap_floor_bytes), and logs what it set, or
// why it set nothing.
func applyMemoryDefaults(logger *slog.Logger, floor int64) {
	d, err := memoryDefaults(os.DirFS("/"), os.LookupEnv, floor)
	if err != nil {
		logger.Warn("runtime memory defaults not applied", slog.String("error", err.Error()))
		return
	}
	if d.limit > 0 {
		debug.SetMemoryLimit(d.limit)
	}
	if d.gogc > 0 {
		debug.SetGCPercent(d.gogc)
	}
	if d.floor > 0 {
		// A GOMEMLIMIT from the environment caps the floor as the
		// cgroup's does (math.MaxInt64 when there is none).
		if limit := debug.SetMemoryLimit(-1); d.floor > limit/4 {
			d.floor = limit / 4
		}
		base := d.gogc
		if base == 0 {
			base = 100
		}
		gcfloor.Start(d.floor, base)
	}
	if d.limit > 0 || d.gogc > 0 || d.floor > 0 {
		logger.Info("runtime memory defaults", slog.Int64("gomemlimit", d.limit), slog.Int("gogc", d.gogc),
			slog.Int64("heap_floor", d.floor), slog.String("from", d.why))
	}
}

// v1Unlimited is the smallest cgroup v1 memory.limit_in_bytes read as no
// limit: v1 writes "unlimited" as the largest page-aligned counter value
// (9223372036854771712 with 4 KiB pages), not as "max".
const v1Unlimited = 1 << 62

// readMemoryMax returns the path and trimmed content of the memory limit
// of this process's cgroup ("" when there is none): cgroup v2's
// memory.max, or on a cgroup v1 host the memory controller's
// memory.limit_in_bytes, whose "unlimited" value is returned as "max". The
// process's own cgroup is looked for first, then the hierarchy's root (a
// container sees its own cgroup there).
func readMemoryMax(root fs.FS) (string, string, error) {
	var v2, v1 []string
	if b, err := fs.ReadFile(root, "proc/self/cgroup"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			// hierarchy-ID:controllers:path; cgroup v2 is hierarchy 0 with
			// no controllers, v1's memory controller may share a line.
			parts := strings.SplitN(sc.Text(), ":", 3)
			if len(parts) != 3 {
				continue
			}
			dir := path.Clean("/" + parts[2])
			switch {
			case parts[0] == "0" && parts[1] == "":
				v2 = append(v2, path.Join("sys/fs/cgroup", dir, "memory.max"))
			case slices.Contains(strings.Split(parts[1], ","), "memory"):
				v1 = append(v1, path.Join("sys/fs/cgroup/memory", dir, "memory.limit_in_bytes"))
			}
		}
	}
	candidates := append(v2, v1...)
	candidates = append(candidates, "sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory/memory.limit_in_bytes")
	for _, f := range candidates {
		b, err := fs.ReadFile(root, f)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "/" + f, "", err
		}
		raw := strings.TrimSpace(string(b))
		if strings.HasSuffix(f, "memory.limit_in_bytes") {
			if n, err := strconv.ParseInt(raw, 10, 64); err == nil && n >= v1Unlimited {
				raw = "max"
			}
		}
		return "/" + f, raw, nil
	}
	return "", "", nil
}
