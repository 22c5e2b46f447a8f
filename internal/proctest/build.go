// Package proctest runs the quotagate binary as a separate process for the
// tests of cmd/quotagate, e2e and deploy: it compiles the binary once per
// test binary (without -race, whatever the test binary uses: load tests
// measure the gateway, not the race detector), starts it on listeners of
// port 0 and learns the ports it bound (from the file its -addr-file flag
// names, or its "quotagate started" log line), polls /readyz, and stops it
// with SIGTERM.
//
// A test on a busy machine can fail two ways, and proctest keeps them apart:
// a wrong answer (the product's fault) fails the test as usual; a bound on
// time that the machine was too slow to meet fails it through Overrun, whose
// message starts with "missed deadline:" and carries the load average.
//
// No helper here hands out a port number: a port that was free a moment ago
// may be taken by another process before the gateway binds it.
package proctest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// BinEnv names an environment variable that, when set, is the path of a
// prebuilt quotagate binary that Binary returns instead of building one.
const BinEnv = "QUOTAGATE_TEST_BIN"

// Spec says how the binary is compiled: `go build` is run in the module's
// root directory with Flags, then "-o" and the output path, then Package,
// with Env added to the environment.
type Spec struct {
	Flags   []string
	Env     []string
	Package string
}

// Dockerfile is the Dockerfile's build (static, -trimpath, stripped) with
// the default version: what ships, and, being one set of flags for cmd, e2e
// and deploy, one compile of the packages in the build cache.
var Dockerfile = Spec{
	Flags:   []string{"-trimpath", "-ldflags=-s -w"},
	Env:     []string{"CGO_ENABLED=0"},
	Package: "./cmd/quotagate",
}

type build struct {
	once sync.Once
	path string
	err  error
}

var builds struct {
	mu   sync.Mutex
	byID map[string]*build
	dirs []string
}

// Binary returns the path of the quotagate binary built with the Dockerfile
// spec, building it on the first call in this test binary, or the path in
// $QUOTAGATE_TEST_BIN when that is set. A failed build fails tb.
func Binary(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv(BinEnv); p != "" {
		return p
	}
	return Build(tb, Dockerfile)
}

// Build returns the path of the binary built with spec, building it on the
// first call with an equal spec in this test binary; concurrent callers wait
// for that one build. A failed build fails tb (and every later caller). Call
// Cleanup from TestMain to remove the built binaries.
func Build(tb testing.TB, spec Spec) string {
	tb.Helper()
	id := strings.Join(spec.Flags, "\x00") + "\x01" + strings.Join(spec.Env, "\x00") + "\x01" + spec.Package
	builds.mu.Lock()
	if builds.byID == nil {
		builds.byID = map[string]*build{}
	}
	b := builds.byID[id]
	if b == nil {
		b = &build{}
		builds.byID[id] = b
	}
	builds.mu.Unlock()
	b.once.Do(func() { b.path, b.err = compile(spec) })
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.path
}

func compile(spec Spec) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "quotagate-bin-")
	if err != nil {
		return "", err
	}
	builds.mu.Lock()
	builds.dirs = append(builds.dirs, dir)
	builds.mu.Unlock()
	out := filepath.Join(dir, "quotagate")
	args := append([]string{"build"}, spec.Flags...)
	args = append(args, "-o", out, spec.Package)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), spec.Env...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("proctest: go %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	return out, nil
}

// moduleRoot is the directory of the go.mod of the working directory (a
// test runs in its package's directory).
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("proctest: go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("proctest: the working directory is not inside a Go module")
	}
	return filepath.Dir(mod), nil
}

// Cleanup removes every binary built so far. Call it from TestMain after
// m.Run; Main does.
func Cleanup() {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	for _, d := range builds.dirs {
		_ = os.RemoveAll(d)
	}
	builds.dirs = nil
	builds.byID = nil
}

// Main runs the tests and removes the built binaries; use it as
//
//	func TestMain(m *testing.M) { os.Exit(proctest.Main(m)) }
func Main(m *testing.M) int {
	code := m.Run()
	Cleanup()
	return code
}
