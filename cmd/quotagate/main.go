// Command quotagate is a rate-limiting HTTP reverse proxy that enforces one
// limit across a fleet of instances.
//
//	quotagate [-config config.yaml]                  run the gateway
//	quotagate validate [-config FILE]                check a config, print every error
//	quotagate explain [-config FILE] -method M -path P [-key K] [-header K:V] [-body FILE]
//	                                                 show what would apply to a request
//	quotagate healthcheck [-url URL]                 exit 0 when a gateway's /readyz answers 200
//	quotagate version                                print the version
//	quotagate help                                   list the commands (also -h, --help)
//
// Exit codes: 0 ok, 1 invalid config or flags, 2 failure to start or run.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/quotagate/quotagate/telemetry"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// exitError carries a process exit code with its message.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErr(format string, a ...any) error {
	return &exitError{code: 1, err: fmt.Errorf(format, a...)}
}

func runtimeErr(err error) error { return &exitError{code: 2, err: err} }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	// The message of the exit is written to stderr for at most
	// telemetry.StallTimeout, so that a stderr that no longer
	// reads (a log reader that hung) cannot keep the process from exiting,
	// with a config error at the start as after it served: the exit status
	// still says what happened.
	os.Exit(exitCode(err, boundedWriter{w: os.Stderr, timeout: telemetry.StallTimeout}))
}

// boundedWriter writes to w, but returns after timeout with an error when
// w has not returned by then, leaving that Write to finish (or not) in a
// goroutine of its own. A timeout of 0 or less gives up at once unless w
// has already returned.
type boundedWriter struct {
	w       io.Writer
	timeout time.Duration
	// after, when not nil, stands in for the timer: it returns a channel
	// that receives once the given time has passed.
	after func(time.Duration) <-chan time.Time
}

func (b boundedWriter) Write(p []byte) (int, error) {
	type result struct {
		n   int
		err error
	}
	r, ok := within(b.timeout, b.after, func() result {
		n, err := b.w.Write(p)
		return result{n, err}
	})
	if !ok {
		return 0, fmt.Errorf("write not done within %v", b.timeout)
	}
	return r.n, r.err
}

// within runs f in a goroutine of its own and returns its result and true,
// or, when f has not returned once timeout has passed, the zero T and
// false, leaving f to finish (or not) on its own: a write to a pipe that
// no one reads, or a shutdown that waits for one, never returns. after,
// when not nil, stands in for the timer: it returns a channel that
// receives once the given time has passed.
func within[T any](timeout time.Duration, after func(time.Duration) <-chan time.Time, f func() T) (T, bool) {
	done := make(chan T, 1)
	go func() { done <- f() }()
	if after == nil {
		t := time.NewTimer(timeout)
		defer t.Stop()
		after = func(time.Duration) <-chan time.Time { return t.C }
	}
	select {
	case r := <-done:
		return r, true
	case <-after(timeout):
		var zero T
		return zero, false
	}
}

// exitCode prints err (if any) and maps it to the process exit code.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && ee.err.Error() != "" {
			fmt.Fprintln(stderr, "quotagate:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "quotagate:", err)
	return 2
}

// run dispatches a command line through the command table. It returns nil
// on success or an error whose exit code says what failed.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, ok := lookupCommand(args)
	if !ok {
		return unknownCommand(args[0])
	}
	if c.name != "" {
		args = args[1:]
	}
	err := c.run(ctx, args, stdout, stderr)
	if err == errHelpShown {
		return nil
	}
	return err
}
