package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
)

// TestPipeCtx: a pipeline context ends at its deadline, says so in Err and
// Done, and is reusable: after its channel closed it gets a fresh one, and
// a stopped use closes nothing.
func TestPipeCtx(t *testing.T) {
	var c pipeCtx
	far := time.Now().Add(time.Hour)
	c.start(far)
	if at, ok := c.Deadline(); !ok || !at.Equal(far) {
		t.Fatalf("Deadline = %v, %v; want %v", at, ok, far)
	}
	done := c.Done()
	select {
	case <-done:
		t.Fatal("done closed an hour before the deadline")
	default:
	}
	if c.Err() != nil || c.Value("k") != nil {
		t.Fatalf("before the deadline: Err %v, Value %v", c.Err(), c.Value("k"))
	}
	c.stop()

	c.start(time.Now().Add(-time.Millisecond)) // already past
	if !errors.Is(c.Err(), context.DeadlineExceeded) {
		t.Fatalf("past the deadline: Err = %v", c.Err())
	}
	past := c.Done()
	select {
	case <-past:
	case <-time.After(time.Minute):
		t.Fatal("missed deadline: done not closed a minute after a deadline in the past")
	}
	c.stop()

	c.start(far)
	fresh := c.Done()
	if fresh == past {
		t.Fatal("a reused context kept its closed channel")
	}
	select {
	case <-fresh:
		t.Fatal("the reused context's done is closed")
	default:
	}
	if c.Err() != nil {
		t.Fatalf("reused: Err = %v", c.Err())
	}
	c.stop()
}

// TestPipeCtxLateFire: a run of the timer that comes before the deadline
// of the use it finds (a late run from an earlier use, which consumed the
// timer) sets the timer again, so that done still closes at the deadline.
//
// The deadline is an hour away while the late run comes, so that no
// stall of the test's goroutine can put the run past it; it is then
// moved to now, and the timer that the run set must close done.
func TestPipeCtxLateFire(t *testing.T) {
	var c pipeCtx
	c.start(time.Now().Add(time.Hour))
	done := c.Done()
	c.timer.Stop() // the timer has run: only the late run below is left
	c.fire()       // ... and it comes before the deadline
	if !c.timer.Stop() {
		t.Fatal("a timer run that came before the deadline left the timer unset: done would never close")
	}
	c.mu.Lock()
	c.at = time.Now()
	c.mu.Unlock()
	c.timer.Reset(0)
	select {
	case <-done:
	case <-time.After(time.Minute):
		proctest.FatalOverrun(t, "done not closed a minute after its deadline, with the timer set")
	}
	c.stop()
}

// TestPipeCtxKeepsItsTimer: a use whose deadline is no earlier than the
// one the timer is set for keeps the timer as it is (no reset per
// pipeline); a use with an earlier deadline sets it again for its own;
// a run that finds no use watching closes nothing and leaves the timer
// unset, and the next use's Done sets it.
func TestPipeCtxKeepsItsTimer(t *testing.T) {
	var c pipeCtx
	when := func() (bool, time.Time) {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.set, c.when
	}
	first := time.Now().Add(time.Hour)
	c.start(first)
	c.Done()
	c.stop()
	if set, at := when(); !set || !at.Equal(first) {
		t.Fatalf("after a use: timer set %v for %v, want set for %v (left for the next use)", set, at, first)
	}

	c.start(first.Add(time.Minute))
	later := c.Done()
	if set, at := when(); !set || !at.Equal(first) {
		t.Fatalf("a use with a later deadline: timer set %v for %v, want kept for %v", set, at, first)
	}
	c.stop()

	earlier := time.Now().Add(time.Minute)
	c.start(earlier)
	if c.Done() != later {
		t.Fatal("a use after one whose done did not close got a new channel")
	}
	if set, at := when(); !set || !at.Equal(earlier) {
		t.Fatalf("a use with an earlier deadline: timer set %v for %v, want set for %v", set, at, earlier)
	}
	c.stop()

	c.timer.Stop()
	c.fire() // the run, with no use watching
	if set, _ := when(); set {
		t.Fatal("a run that found no use left the timer marked set")
	}
	select {
	case <-later:
		t.Fatal("a run that found no use closed done")
	default:
	}
	next := time.Now().Add(2 * time.Hour)
	c.start(next)
	c.Done()
	if set, at := when(); !set || !at.Equal(next) || !c.timer.Stop() {
		t.Fatalf("the next use after an idle run: timer set %v for %v, want set for %v", set, at, next)
	}
}
