package telemetry

import "errors"

// StartWriteTimeout bounds how long a Write made before QueueWrites waits
// for the destination: a start must not hang on a log reader that hung.
const StartWriteTimeout = DefaultCloseTimeout

// ErrStartWriteTimeout is what a Write made before QueueWrites returns
// when the destination did not take the line within StartWriteTimeout.
// The line is left to that Write, which goes on in a goroutine of its own
// and writes it if the destination ever reads again.
var ErrStartWriteTimeout = errors.New("telemetry: log destination took no line within the start's bound")

// startWrite is one Write made before QueueWrites: whether its
// destination Write has returned. Guarded by AsyncWriter.startMu.
type startWrite struct{ returned bool }

// writeNow writes p to the destination from a goroutine of its own and
// waits for it at most StartWriteTimeout (w.deadline stands in for the
// timer): it returns what the destination returned, or
// ErrStartWriteTimeout. While a Write that timed out has not returned (the
// destination is stuck) every later line is dropped at once and counted
// in Drops().Operational, so that a start waits on a stuck destination for
// StartWriteTimeout in all, not once per line.
func (w *AsyncWriter) writeNow(p []byte) (int, error) {
	w.startMu.Lock()
	stuck := w.startStuck != nil
	w.startMu.Unlock()
	if stuck {
		w.droppedOps.Add(1)
		return 0, ErrLineDropped
	}
	b := copyLine(p)
	me := &startWrite{}
	done := make(chan error, 1)
	go func() {
		w.direct.Lock()
		_, err := w.dst.Write(*b)
		w.direct.Unlock()
		recycle(b)
		w.startMu.Lock()
		me.returned = true
		if w.startStuck == me {
			w.startStuck = nil
		}
		w.startMu.Unlock()
		done <- err
	}()
	expired, stop := w.bound(StartWriteTimeout)
	defer stop()
	select {
	case err := <-done:
		if err != nil {
			return 0, err
		}
		return len(p), nil
	case <-expired:
	}
	w.startMu.Lock()
	if !me.returned {
		w.startStuck = me
	}
	w.startMu.Unlock()
	return 0, ErrStartWriteTimeout
}
