package telemetry

import (
	"errors"
	"strings"
	"testing"
)

// stuckWriter stands for a pipe whose reader hung: each Write reports
// itself on entered and then never returns, until release is closed (at
// the end of the test, so that the goroutine ends).
type stuckWriter struct {
	entered chan string
	release chan struct{}
}

func newStuckWriter(t *testing.T) *stuckWriter {
	s := &stuckWriter{entered: make(chan string, 100), release: make(chan struct{})}
	t.Cleanup(func() { close(s.release) })
	return s
}

func (s *stuckWriter) Write(p []byte) (int, error) {
	s.entered <- string(p)
	<-s.release
	return len(p), nil
}

// stuckOn waits until the writer's goroutine is inside s's Write and
// returns what it is writing.
func (s *stuckWriter) stuckOn(t *testing.T) string {
	t.Helper()
	return await(t, s.entered, "the writer did not write")
}

// TestAsyncWriterCloseGivesUpOnStuckDestination: against a destination
// that never returns from Write, Close returns once its bound has passed
// (an injected timer, here fired by the test), counting as lost both the
// line of the Write under way and those still queued; lines offered while
// Close waits, and after, are dropped and counted instead of waiting.
func TestAsyncWriterCloseGivesUpOnStuckDestination(t *testing.T) {
	dst := newStuckWriter(t)
	bound := newManualTimer()
	w := newAsyncWriter(dst, 64, 0, nil)
	w.deadline = bound.after
	w.TryWrite([]byte("first\n"))
	if got := dst.stuckOn(t); got != "first\n" {
		t.Fatalf("writing %q, want the first line", got)
	}
	for i := range 9 {
		if !w.TryWrite([]byte(numbered(i))) {
			t.Fatalf("line %d dropped with the queue nearly empty", i)
		}
	}
	done := startClose(w)
	bound.waitStarted(t, DefaultCloseTimeout)
	select {
	case err := <-done:
		t.Fatalf("Close returned %v before its bound passed, with the destination stuck", err)
	default:
	}
	if w.TryWrite([]byte("while closing\n")) {
		t.Error("a line offered while Close waits was taken, with the destination stuck")
	}
	bound.elapse(t)
	err := await(t, done, "Close did not return after its bound passed")
	var lost *LinesLostError
	if !errors.As(err, &lost) {
		t.Fatalf("Close returned %v, want a *LinesLostError", err)
	}
	if lost.Lines != 10 || lost.Timeout != DefaultCloseTimeout {
		t.Errorf("Close reports %d lines lost after %v, want 10 after %v", lost.Lines, lost.Timeout, DefaultCloseTimeout)
	}
	w.QueueWrites()
	if n, err := w.Write([]byte("after\n")); n != 0 || !errors.Is(err, ErrLineDropped) {
		t.Errorf("Write after Close gave up returned %d, %v; want 0, ErrLineDropped", n, err)
	}
	if d := w.Drops(); d.Access != 1 || d.Operational != 1 {
		t.Errorf("drops %+v, want 1 access line (offered during Close) and 1 operational", d)
	}
}

// TestAsyncWriterQueueWritesNeverWaits: after QueueWrites, an operational
// Write returns at once while the destination is stuck, queued up to
// DefaultOperationalQueue lines (access lines taking none of that room) and
// dropped and counted beyond, and Close counts the queued ones as lost.
func TestAsyncWriterQueueWritesNeverWaits(t *testing.T) {
	dst := newStuckWriter(t)
	bound := newManualTimer()
	w := newAsyncWriter(dst, 8, 0, nil)
	w.deadline = bound.after
	w.QueueWrites()
	w.TryWrite([]byte("access\n"))
	dst.stuckOn(t)
	for i := range 8 {
		w.TryWrite([]byte(numbered(i))) // fills the access queue
	}
	wrote := make(chan int, 1)
	go func() {
		dropped := 0
		for i := range DefaultOperationalQueue + 3 {
			if _, err := w.Write([]byte(numbered(i))); err != nil {
				dropped++
			}
		}
		wrote <- dropped
	}()
	if dropped := await(t, wrote, "operational Writes did not return with the destination stuck"); dropped != 3 {
		t.Errorf("%d operational lines dropped, want 3 beyond the queue of %d", dropped, DefaultOperationalQueue)
	}
	if d := w.Drops(); d.Operational != 3 || d.Access != 0 {
		t.Errorf("drops %+v, want 3 operational and no access line", d)
	}
	done := startClose(w)
	bound.waitStarted(t, DefaultCloseTimeout)
	bound.elapse(t)
	var lost *LinesLostError
	if err := await(t, done, "Close did not return after its bound passed"); !errors.As(err, &lost) ||
		lost.Lines != 1+8+DefaultOperationalQueue {
		t.Errorf("Close returned %v, want %d lines lost", err, 1+8+DefaultOperationalQueue)
	}
}

// TestAsyncWriterCloseWaitsForReadingDestination: a destination that reads,
// however slowly, gets every line, access and operational, each kind in
// order, and Close returns nil without its bound having passed.
func TestAsyncWriterCloseWaitsForReadingDestination(t *testing.T) {
	dst := chanWriter{writes: make(chan string)} // each Write waits for the test
	bound := newManualTimer()                    // never fires
	w := newAsyncWriter(dst, 0, 0, nil)
	w.deadline = bound.after
	w.QueueWrites()
	var access, ops strings.Builder
	for i := range 300 {
		line := numbered(i)
		access.WriteString(line)
		w.TryWrite([]byte(line))
		op := "op " + line
		ops.WriteString(op)
		if _, err := w.Write([]byte(op)); err != nil {
			t.Fatal(err)
		}
	}
	done := startClose(w)
	var gotAccess, gotOps strings.Builder
	for gotAccess.Len() < access.Len() || gotOps.Len() < ops.Len() {
		for _, line := range strings.SplitAfter(nextWrite(t, dst), "\n") {
			if strings.HasPrefix(line, "op ") {
				gotOps.WriteString(line)
			} else {
				gotAccess.WriteString(line)
			}
		}
	}
	if err := await(t, done, "Close did not return after the last Write"); err != nil {
		t.Errorf("Close: %v", err)
	}
	if gotAccess.String() != access.String() || gotOps.String() != ops.String() {
		t.Error("the destination did not get every line of each kind in order")
	}
	if d := w.Drops(); d != (LogDrops{}) {
		t.Errorf("drops %+v with a reading destination", d)
	}
}
