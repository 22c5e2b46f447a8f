package main

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// readmeRunCommand returns the Quick start's command that runs the gateway,
// without its comment.
func readmeRunCommand(t *testing.T) string {
	t.Helper()
	f, err := os.Open("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if cmd, _, ok := strings.Cut(sc.Text(), "# run the gateway"); ok {
			return strings.TrimSpace(cmd)
		}
	}
	t.Fatal(`README.md has no line with "# run the gateway"`)
	return ""
}

// TestReadmeRunCommandStopsOnSIGTERM runs the README's run command the way
// a supervisor or script does (sh -c, then SIGTERM to that process) and
// checks that the gateway itself got the signal: it exits 0 after logging
// its drain, and both ports are free again. With `go run`, the signal ended
// only the go tool and the gateway kept the ports.
func TestReadmeRunCommandStopsOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary into bin/")
	}
	line := readmeRunCommand(t)
	listen, admin := freeAddr(t), freeAddr(t)
	var logs lockedBuffer
	sh := exec.Command("sh", "-c", line)
	sh.Dir = "../.."
	sh.Env = append(os.Environ(), "QUOTAGATE_SERVER_LISTEN="+listen, "QUOTAGATE_SERVER_ADMIN_LISTEN="+admin)
	sh.Stdout, sh.Stderr = &logs, &logs
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- sh.Wait() }()
	t.Cleanup(func() { _ = sh.Process.Kill() })

	// Building can take minutes on a busy machine: wait for readiness or
	// for the command to end, whichever comes first.
	ready := false
	for deadline := time.Now().Add(5 * time.Minute); !ready && time.Now().Before(deadline); {
		select {
		case err := <-exited:
			t.Fatalf("%q ended before serving: %v\n%s", line, err, logs.String())
		case <-time.After(50 * time.Millisecond): // polling readiness
		}
		if resp, err := http.Get("http://" + admin + "/readyz"); err == nil {
			resp.Body.Close()
			ready = resp.StatusCode == http.StatusOK
		}
	}
	if !ready {
		t.Fatalf("deadline missed: %q not ready after 5 minutes\n%s", line, logs.String())
	}

	if err := sh.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("after SIGTERM: %v, want exit 0 from the gateway\n%s", err, logs.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("deadline missed: still running a minute after SIGTERM\n%s", logs.String())
	}
	for _, addr := range []string{listen, admin} {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("%s still held after the command ended: %v", addr, err)
			continue
		}
		l.Close()
	}
	if !strings.Contains(logs.String(), `"drain_timeout":"10s"`) {
		t.Errorf("the drain log line lacks a readable drain_timeout:\n%s", logs.String())
	}
}

// TestBinaryNewcomerCommands runs the shipped binary the way the README
// tells a newcomer to: help, an unknown command, a malformed explain.
func TestBinaryNewcomerCommands(t *testing.T) {
	bin := buildBinary(t)
	for _, tc := range []struct {
		args []string
		code int
		want string // in stdout for exit 0, else in stderr
	}{
		{[]string{"-h"}, 0, "quotagate healthcheck"},
		{[]string{"--help"}, 0, "quotagate explain"},
		{[]string{"nope"}, 1, "healthcheck"},
		{[]string{"explain", "-config", "../../config.yaml", "-method", "GE T", "-path", "/x"}, 1, `method "GE T"`},
		{[]string{"explain", "-config", "../../config.yaml", "-path", "/a b"}, 1, "whitespace"},
		{[]string{"validate", "-config", "../../config/testdata/syntax/list_item_in_mapping.yaml"}, 1, "line 5: did not find expected key"},
	} {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(bin, tc.args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		out := stdout.String()
		if tc.code != 0 {
			out = stderr.String()
		}
		if code != tc.code || !strings.Contains(out, tc.want) || strings.Contains(stderr.String(), "panic") {
			t.Errorf("quotagate %q: exit %d, stdout %q, stderr %q; want exit %d with %q", tc.args, code, stdout.String(), stderr.String(), tc.code, tc.want)
		}
	}
}

// lockedBuffer is a bytes.Buffer that a process writes while a test reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
