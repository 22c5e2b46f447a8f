package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/telemetry"
)

// everyCommand is what docs/reference/cli.md promises; the help text and the
// unknown-command error must both list all of it.
var everyCommand = []string{"validate", "explain", "healthcheck", "version", "help"}

func TestHelpListsEveryCommandAndExitsZero(t *testing.T) {
	for _, arg := range []string{"-h", "-help", "--help", "help"} {
		code, out, errs := runCmd(t, arg)
		if code != 0 {
			t.Errorf("quotagate %s: exit %d, want 0\n%s", arg, code, errs)
		}
		for _, name := range everyCommand {
			if !strings.Contains(out, "quotagate "+name) {
				t.Errorf("quotagate %s: output lacks %q:\n%s", arg, name, out)
			}
		}
		if !strings.Contains(out, "quotagate [-config FILE]") {
			t.Errorf("quotagate %s: output lacks the gateway itself:\n%s", arg, out)
		}
	}
}

func TestUnknownCommandListsEveryCommand(t *testing.T) {
	for _, args := range [][]string{{"frobnicate"}, {"-config", "x.yaml", "frobnicate"}, {"Validate"}} {
		code, _, errs := runCmd(t, args...)
		if code != 1 {
			t.Errorf("%q: exit %d, want 1", args, code)
		}
		for _, name := range everyCommand {
			if !strings.Contains(errs, name) {
				t.Errorf("%q: error lacks %q: %s", args, name, errs)
			}
		}
	}
}

func TestCommandHelpExitsZero(t *testing.T) {
	for _, name := range []string{"validate", "explain", "healthcheck"} {
		code, out, errs := runCmd(t, name, "-h")
		if code != 0 || !strings.Contains(out, "-config") && !strings.Contains(out, "-url") {
			t.Errorf("quotagate %s -h: exit %d, stdout %q, stderr %q", name, code, out, errs)
		}
	}
	code, out, _ := runCmd(t, "-config", "x.yaml", "-h")
	if code != 0 || !strings.Contains(out, "-watch-interval") {
		t.Errorf("quotagate -config x.yaml -h: exit %d, stdout %q", code, out)
	}
	if code, _, errs := runCmd(t, "validate", "-nope"); code != 1 || !strings.Contains(errs, "-nope") {
		t.Errorf("quotagate validate -nope: exit %d, stderr %q", code, errs)
	}
}

// TestExplainMalformedRequestExitsOne: `explain -method 'GE T'` once
// panicked inside httptest.NewRequest.
func TestExplainMalformedRequestExitsOne(t *testing.T) {
	for _, tc := range [][2]string{{"GE T", "/x"}, {"", "/x"}, {"GET", "/a b"}, {"GET", "x"}, {"GET", "/%zz"}, {"GET", "/\x00"}} {
		code, out, errs := runCmd(t, "explain", "-config", "../../config.yaml", "-method", tc[0], "-path", tc[1])
		if code != 1 || out != "" || !strings.Contains(errs, "explain: ") {
			t.Errorf("explain -method %q -path %q: exit %d, stdout %q, stderr %q; want exit 1 with an error", tc[0], tc[1], code, out, errs)
		}
	}
}

// FuzzExplain: no method, path or credential makes explain panic; it
// succeeds or fails with exit 1.
func FuzzExplain(f *testing.F) {
	f.Add("GET", "/v1/transfers/42", "")
	f.Add("GE T", "/x", "")
	f.Add("POST", "/v1/transfers/42?x=%zz", "demo-free-key")
	f.Add("get", "//x/../y", "eyJhbGciOiJIUzI1NiJ9.e30.x")
	f.Add("\x00", "/\x7f", "\r\n")
	f.Fuzz(func(t *testing.T, method, path, key string) {
		err := run(context.Background(), []string{"explain", "-config", "../../config.yaml", "-method", method, "-path", path, "-key", key}, io.Discard, io.Discard)
		if code := exitCode(err, io.Discard); code != 0 && code != 1 {
			t.Fatalf("explain -method %q -path %q -key %q: exit %d (%v)", method, path, key, code, err)
		}
	})
}

// FuzzCommandLine: no command line makes a command panic. The gateway
// itself and healthcheck (which dials the network) are left out: the first
// argument is a command that only reads files, or a word that names none.
func FuzzCommandLine(f *testing.F) {
	f.Add(uint8(0), "-config", "../../config.yaml", "-method", "GE T")
	f.Add(uint8(1), "-config", "../../config.yaml", "-path", "/v1/transfers/1")
	f.Add(uint8(2), "-h", "", "", "")
	f.Add(uint8(3), "x", "-config", "", "")
	f.Add(uint8(4), "--", "-h", "=", "-config=")
	f.Add(uint8(5), "frob", "", "", "")
	names := []string{"validate", "explain", "version", "help", "-h", "--help"}
	f.Fuzz(func(t *testing.T, sel uint8, a, b, c, d string) {
		args := []string{"", a, b, c, d}
		for _, arg := range args {
			if strings.Contains(arg, "/dev/") || strings.Contains(arg, "/proc/") {
				t.Skip("reads a device, not a file") // /dev/zero never ends
			}
		}
		if int(sel) < len(names) {
			args[0] = names[sel]
		} else {
			args[0] = "x" + a // never a command, never a flag
		}
		err := run(context.Background(), args, io.Discard, io.Discard)
		if code := exitCode(err, io.Discard); code != 0 && code != 1 {
			t.Fatalf("%q: exit %d (%v)", args, code, err)
		}
	})
}

// TestBadFlagWithStuckStderrExits1: a bad flag of the gateway, with a
// stderr that does not read (a log reader that hung), still ends the
// start with exit 1 once telemetry.StallTimeout has passed. Before,
// the usage went to stderr with no bound and the start hung for ever.
func TestBadFlagWithStuckStderrExits1(t *testing.T) {
	t.Parallel()
	stuck := blockedWriter{release: make(chan struct{})}
	defer close(stuck.release)
	done := make(chan error, 1)
	go func() { done <- run(context.Background(), []string{"-no-such-flag"}, io.Discard, stuck) }()
	select {
	case err := <-done:
		if code := exitCode(err, io.Discard); code != 1 {
			t.Fatalf("a bad flag with a stuck stderr: exit %d (%v), want 1", code, err)
		}
	case <-time.After(time.Minute):
		proctest.FatalOverrun(t, "a bad flag with a stuck stderr: no exit within a minute (the bound is %v)", telemetry.StallTimeout)
	}
}
