package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// buildBinary compiles quotagate once per test binary.
func buildBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "quotagate-bin-")
		if buildErr != nil {
			return
		}
		builtBin = filepath.Join(buildDir, "quotagate")
		// The Dockerfile's flags (static, -trimpath): what ships, and one
		// compile shared with the e2e and deploy tests.
		build := exec.Command("go", "build", "-trimpath", "-o", builtBin, ".")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := build.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// waitReady polls /readyz until it answers 200 or the deadline passes.
func waitReady(t *testing.T, admin string, proc *exec.Cmd, logs *bytes.Buffer) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if proc.ProcessState != nil {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling readiness
	}
	t.Fatalf("gateway not ready; logs:\n%s", logs.String())
}

// startBinary writes cfg (when it is not a path to an existing file) and
// runs the built gateway on it with env added to the environment, waits
// until its admin listener at admin is ready, and kills it when t ends.
func startBinary(t *testing.T, cfg, admin string, env ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	bin := buildBinary(t)
	path := cfg
	if _, err := os.Stat(cfg); err != nil {
		path = filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	logs := &bytes.Buffer{}
	proc := exec.Command(bin, "-config", path)
	proc.Env = append(os.Environ(), env...)
	proc.Stdout, proc.Stderr = logs, logs
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proc.Process.Kill() })
	waitReady(t, admin, proc, logs)
	return proc, logs
}

func TestBinarySIGTERMDrainsInFlightRequest(t *testing.T) {
	bin := buildBinary(t)
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		_, _ = io.WriteString(w, "done")
	}))
	defer up.Close()
	listen, admin := freeAddr(t), freeAddr(t)
	cfg := fmt.Sprintf(`server: {listen: %q, admin_listen: %q, shutdown_timeout: 10s}
identity: {anonymous: {tier: anonymous}}
tiers: {anonymous: {}}
upstreams: {slow: {url: %q, timeout: 30s}}
routes: [{name: slow, method: GET, path: /slow, upstream: slow}]
`, listen, admin, up.URL)
	proc, logs := startBinary(t, cfg, admin)
	path := proc.Args[2]

	type result struct {
		code int
		body string
		err  error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := http.Get("http://" + listen + "/slow")
		if err != nil {
			res <- result{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- result{code: resp.StatusCode, body: string(b)}
	}()
	<-arrived
	if err := proc.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// A second instance on the same address fails to start with exit 2
	// while the first is draining.
	second := exec.Command(bin, "-config", path)
	if err := second.Run(); err == nil {
		t.Error("a second gateway on a used port started")
	} else {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("second instance: %v, want exit code 2", err)
		}
	}
	close(release)
	r := <-res
	if r.err != nil || r.code != 200 || r.body != "done" {
		t.Fatalf("in-flight request across SIGTERM: %+v\nlogs:\n%s", r, logs.String())
	}
	if err := proc.Wait(); err != nil {
		t.Fatalf("gateway exit after SIGTERM: %v\nlogs:\n%s", err, logs.String())
	}
}
