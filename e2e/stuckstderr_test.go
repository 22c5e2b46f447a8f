//go:build linux

package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/internal/redistest"
)

// Linux fcntl and ioctl requests of a pipe.
const (
	fSetPipeSize = 1031   // F_SETPIPE_SZ
	fionread     = 0x541B // FIONREAD
)

// stuckStderrExit bounds the exit after SIGTERM with stderr stuck: the
// documented bound (server.shutdown_timeout, 3 s here, plus up to 5 s of
// telemetry flush and 2 s of log flush) with room for a loaded machine.
const stuckStderrExit = 30 * time.Second

// TestStuckStderr: a gateway whose stderr is a pipe nobody reads (a log
// reader that hung) keeps answering once the pipe is full, also requests
// whose store failure writes an operational warning, and exits on SIGTERM.
// Access lines fill the pipe; the test then tops it up to the last byte
// through a non-blocking descriptor of its own, so that every later write
// of the gateway to it would block.
func TestStuckStderr(t *testing.T) {
	rs := redistest.StartStandalone(t)
	up := startUpstream(t)
	cfg := limiterConfig(up.URL(), nil, "acme")
	cfg.useRedis("250ms", rs.Addr)
	cfg.Log = &logCfg{Level: "info"} // an access line per request
	cfg.Policies["p_open"] = policyCfg{OnStoreError: "open", Limits: map[string]limitCfg{"std": bucket(100000, "1s", 100000)}}
	cfg.route("open", "GET", "/open/{rest...}", 1, "p_open")

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	// Closed after the gateway has been stopped (cleanups run last first):
	// a reader closed earlier would turn the gateway's writes into EPIPE.
	t.Cleanup(func() { r.Close() })
	size := 4096 // fewer lines fill it; the default (64 KiB) works too
	if n, _, errno := syscall.Syscall(syscall.SYS_FCNTL, w.Fd(), fSetPipeSize, uintptr(size)); errno != 0 {
		size = 64 << 10
	} else {
		size = int(n)
	}
	gw := startGateway(t, "gw", cfg, func(o *proctest.Options) { o.Stderr = w })
	w.Close() // the gateway holds the write end now

	client := newClient(8)
	get := func(i int) outcome {
		return do(client, call{base: gw.URL, path: "/open/" + strconv.Itoa(i), key: "key-acme"}, false)
	}
	// Enough access lines to fill a 4 KiB pipe several times over (the
	// writer then blocks in write(2)); the 64 KiB default is filled by
	// topUp.
	for i := range 60 {
		switch o := get(i); {
		case o.status == 0:
			proctest.FatalOverrun(t, "with Redis up: request %d unanswered within %v: %v", i, requestTimeout, o.err)
		case o.status != http.StatusOK:
			t.Fatalf("with Redis up: status %d, want 200", o.status)
		}
	}
	for wait := time.Now(); pipeBytes(t, r) == 0; {
		if time.Since(wait) > 10*time.Second {
			proctest.FatalOverrun(t, "no access line of 60 requests reached the pipe (of %d bytes) within 10s", size)
		}
		time.Sleep(10 * time.Millisecond) // polling another process's writes
	}
	topUp(t, r)

	rs.Kill() // every decision now fails: on_store_error open, and a warning
	const n = 16
	outs := make([]outcome, n)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Go(func() { outs[i] = get(1000 + i) })
	}
	wg.Wait()
	unanswered := 0
	for _, o := range outs {
		switch {
		case o.status == 0:
			unanswered++
		case o.status != http.StatusOK:
			t.Errorf("with Redis down: status %d, want 200 (on_store_error open)", o.status)
		}
	}
	if unanswered > 0 {
		proctest.Overrun(t, "%d of %d requests unanswered within %v with Redis down and stderr stuck (first error: %v)",
			unanswered, n, requestTimeout, firstErr(outs))
	}
	// The admin listener answers too, and the requests above did meet the
	// store failure whose warning the gateway logs.
	if n := gw.metric("quotagate_store_errors_total"); n == 0 {
		t.Errorf("quotagate_store_errors_total = 0 with Redis killed; the failure path was not taken")
	}

	// A connection the client dialled but never used would hold the
	// drain for 5 s (net/http's grace for new connections), past
	// shutdown_timeout: an exit status 2 unrelated to the log.
	client.CloseIdleConnections()
	gw.proc.Signal(syscall.SIGTERM)
	if err := gw.proc.Wait(stuckStderrExit); err != nil {
		t.Errorf("exit after SIGTERM with stderr stuck: %v, want status 0", err)
	}
}

// pipeBytes is the number of bytes waiting in the pipe r.
func pipeBytes(t *testing.T, r *os.File) int {
	t.Helper()
	var n int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, r.Fd(), fionread, uintptr(unsafe.Pointer(&n))); errno != 0 {
		t.Fatalf("FIONREAD: %v", errno)
	}
	return int(n)
}

// topUp fills the pipe r to the last byte through a non-blocking write
// descriptor of the test's own (a new open file description, so the
// gateway's stays blocking): every later write to it blocks until a reader
// reads, which none does.
func topUp(t *testing.T, r *os.File) {
	t.Helper()
	fd, err := syscall.Open(fmt.Sprintf("/proc/self/fd/%d", r.Fd()), syscall.O_WRONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("opening the pipe to fill it: %v", err)
	}
	defer syscall.Close(fd)
	chunk := make([]byte, 512)
	for len(chunk) > 0 {
		_, err := syscall.Write(fd, chunk)
		switch {
		case errors.Is(err, syscall.EAGAIN):
			chunk = chunk[:len(chunk)/2] // what is left is smaller
		case err != nil:
			t.Fatalf("filling the pipe: %v", err)
		}
	}
}

// firstErr is the transport error of the first unanswered outcome.
func firstErr(outs []outcome) error {
	for _, o := range outs {
		if o.status == 0 {
			return o.err
		}
	}
	return nil
}

// TestStuckStdoutConsoleExporter: with OTEL_METRICS_EXPORTER=console and
// stdout a pipe nobody reads, SIGTERM still ends the gateway. The console
// exporter writes its last export to stdout while the meter provider shuts
// down, and the SDK's reader waits for that write whatever its context
// says; the gateway gives the telemetry flush its bound and exits.
func TestStuckStdoutConsoleExporter(t *testing.T) {
	cfg := limiterConfig("echo:", nil, "acme")
	cfg.route("all", "GET", "/{rest...}", 1)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() }) // after the gateway has stopped
	gw := startGateway(t, "gw", cfg, withEnv("OTEL_METRICS_EXPORTER=console"),
		withEnv("OTEL_METRIC_EXPORT_INTERVAL=3600000"), // only the last export writes
		func(o *proctest.Options) { o.Stdout = w })
	w.Close() // the gateway holds the write end now
	topUp(t, r)

	gw.proc.Signal(syscall.SIGTERM)
	if err := gw.proc.Wait(stuckStderrExit); err != nil {
		t.Errorf("exit after SIGTERM with stdout stuck under the console exporter: %v, want status 0", err)
	}
}

// TestStuckStderrAtStart: a gateway started while its stderr is a pipe
// that is already full and that nobody reads (a log reader that hung
// before a restart) starts and serves anyway: the lines it writes before
// "quotagate started" wait for stderr for at most 2 s in all, then are
// dropped and counted. Its Redis is down, so the start writes the
// store's ERROR line too, and the open policy lets requests through. It
// exits on SIGTERM; and a config error with such a stderr still ends the
// process, with exit status 1.
func TestStuckStderrAtStart(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() }) // after the gateway has stopped
	topUp(t, r)

	rs := redistest.StartStandalone(t)
	rs.Kill()
	up := startUpstream(t)
	cfg := limiterConfig(up.URL(), nil, "acme")
	cfg.useRedis("250ms", rs.Addr)
	cfg.Log = &logCfg{Level: "info"}
	cfg.Policies["p_open"] = policyCfg{OnStoreError: "open", Limits: map[string]limitCfg{"std": bucket(100, "1s", 100)}}
	cfg.route("open", "GET", "/open/{rest...}", 1, "p_open")
	gw := startGateway(t, "gw", cfg, func(o *proctest.Options) { o.Stderr = w })

	o := do(newClient(1), call{base: gw.URL, path: "/open/1", key: "key-acme"}, false)
	switch {
	case o.status == 0:
		proctest.FatalOverrun(t, "request unanswered within %v with stderr stuck since the start: %v", requestTimeout, o.err)
	case o.status != http.StatusOK:
		t.Errorf("status %d, want 200 (Redis down, on_store_error open)", o.status)
	}
	if n := gw.metric("quotagate_log_lines_dropped_total", "kind=operational"); n < 1 {
		t.Errorf("quotagate_log_lines_dropped_total{kind=operational} = %v, want the start's lines that stderr did not take counted", n)
	}
	gw.proc.Signal(syscall.SIGTERM)
	if err := gw.proc.Wait(stuckStderrExit); err != nil {
		t.Errorf("exit after SIGTERM with stderr stuck since the start: %v, want status 0", err)
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("server: {listen: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := proctest.Start(t, proctest.Binary(t), proctest.Options{Name: "bad", NoListen: true,
		Args: []string{"-config", bad}, Stderr: w})
	w.Close()
	var ee *exec.ExitError
	if err := p.Wait(stuckStderrExit); !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("a config error with stderr stuck: exit %v, want status 1", err)
	}
}
