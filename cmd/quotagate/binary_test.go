package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/quotagate/quotagate/internal/proctest"
)

func TestMain(m *testing.M) { os.Exit(proctest.Main(m)) }

// startBinary writes cfg (when it is not a path to an existing file) and
// runs the built gateway on it with env added to the environment, and
// waits until it is ready. Configs listen on port 0: the process's Listen
// and AdminListen are the bound addresses. The gateway is stopped when t
// ends.
func startBinary(t *testing.T, cfg string, env ...string) *proctest.Proc {
	t.Helper()
	p := proctest.Start(t, proctest.Binary(t), proctest.Options{
		Args: []string{"-config", configFile(t, cfg)},
		Env:  proctest.Environ(env...),
	})
	p.WaitReady(0)
	return p
}

// configFile returns cfg when it names an existing file, or else the path
// of a temporary file holding cfg.
func configFile(t *testing.T, cfg string) string {
	t.Helper()
	if _, err := os.Stat(cfg); err == nil {
		return cfg
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestBinarySIGTERMDrainsInFlightRequest(t *testing.T) {
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		_, _ = io.WriteString(w, "done")
	}))
	defer up.Close()
	const cfg = `server: {listen: %q, admin_listen: %q, shutdown_timeout: 10s}
identity: {anonymous: {tier: anonymous}}
tiers: {anonymous: {}}
upstreams: {slow: {url: %q, timeout: 30s}}
routes: [{name: slow, method: GET, path: /slow, upstream: slow}]
`
	proc := startBinary(t, fmt.Sprintf(cfg, "127.0.0.1:0", "127.0.0.1:0", up.URL))

	type result struct {
		code int
		body string
		err  error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := http.Get(proc.URL() + "/slow")
		if err != nil {
			res <- result{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- result{code: resp.StatusCode, body: string(b)}
	}()
	<-arrived
	proc.Signal(syscall.SIGTERM)
	// A second instance on the addresses the first one bound fails to start
	// with exit 2 while the first is draining (its admin listener stays
	// open until the drain ends).
	second := proctest.Start(t, proctest.Binary(t), proctest.Options{
		Name:     "second",
		Args:     []string{"-config", configFile(t, fmt.Sprintf(cfg, proc.Listen, proc.AdminListen, up.URL))},
		NoListen: true,
	})
	if err := second.Wait(proctest.StartTimeout); err == nil {
		t.Error("a second gateway on a used port started and exited 0")
	} else {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("second instance: %v, want exit code 2; log:\n%s", err, second.Logs.Tail(20))
		}
	}
	close(release)
	r := <-res
	if r.err != nil || r.code != 200 || r.body != "done" {
		t.Fatalf("in-flight request across SIGTERM: %+v", r)
	}
	if err := proc.Wait(proctest.StopTimeout); err != nil {
		t.Fatalf("gateway exit after SIGTERM: %v", err)
	}
}
