package telemetry

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// DefaultCloseTimeout is how long Close waits for the destination to take
// the queued lines before it gives up on them. Flushing a full queue to a
// destination that reads takes milliseconds; the bound matters only when
// the destination has stopped reading (a pipe whose reader hung).
const DefaultCloseTimeout = 2 * time.Second

// errClosed is what a second Close returns.
var errClosed = errors.New("telemetry: AsyncWriter already closed")

// LinesLostError is what Close returns when it gave up on a destination
// that did not take the queued lines within its bound.
type LinesLostError struct {
	Lines   uint64        // lines queued, or in the Write under way, then
	Timeout time.Duration // the bound Close waited
}

func (e *LinesLostError) Error() string {
	return fmt.Sprintf("telemetry: log destination took no lines for %v; %d lines lost", e.Timeout, e.Lines)
}

// Close is CloseWithin(DefaultCloseTimeout).
func (w *AsyncWriter) Close() error { return w.CloseWithin(DefaultCloseTimeout) }

// CloseWithin writes every queued line to the destination, stops the
// writing goroutine and returns nil once both are done, or, when that has
// not happened within timeout (the destination does not return from a
// Write), gives up: it discards the lines still queued, leaves the writing
// goroutine blocked in the destination's Write, and returns a
// *LinesLostError counting the discarded lines and those of the Write under
// way (written in part or not at all). A timeout of 0 or less waits as long
// as the destination takes. A second Close returns an error and does
// nothing.
//
// Lines written after a Close that flushed everything go to the
// destination directly (synchronously); after a Close that gave up, or
// while Close waits, they are dropped and counted in Drops.
func (w *AsyncWriter) CloseWithin(timeout time.Duration) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return errClosed
	}
	w.closed = true
	close(w.nudge) // no TryWrite sends to it from now on
	close(w.queue)
	close(w.ops)
	w.mu.Unlock()
	if timeout <= 0 {
		<-w.done
		return nil
	}
	expired, stop := w.bound(timeout)
	defer stop()
	select {
	case <-w.done:
		return nil
	case <-expired:
	}
	w.abandoned.Store(true)
	select {
	case <-w.done: // finished as the bound ran out
		return nil
	default:
	}
	lost := discard(w.ops, func(o opLine) *[]byte { return o.b }) +
		discard(w.queue, func(b *[]byte) *[]byte { return b }) + uint64(max(w.held.Load(), 0))
	return &LinesLostError{Lines: lost, Timeout: timeout}
}

// discard takes every line left in the closed queue q, hands the buffer
// buf returns for each to recycle (so that an oversized one is not pooled,
// as after a Write), and returns how many there were.
func discard[T any](q chan T, buf func(T) *[]byte) uint64 {
	var n uint64
	for v := range q {
		recycle(buf(v))
		n++
	}
	return n
}

// writeClosed writes p, offered after Close, directly if the writer has
// flushed everything and stopped; otherwise (Close is waiting, or gave up)
// it drops p, counts it in drops and returns ErrLineDropped.
func (w *AsyncWriter) writeClosed(p []byte, drops *atomic.Uint64) (int, error) {
	select {
	case <-w.done:
		if !w.abandoned.Load() {
			w.direct.Lock()
			defer w.direct.Unlock()
			return w.dst.Write(p)
		}
	default:
	}
	drops.Add(1)
	return 0, ErrLineDropped
}

// bound returns a channel that receives once d has passed (w.deadline's,
// when set) and a func that stops its timer.
func (w *AsyncWriter) bound(d time.Duration) (<-chan time.Time, func()) {
	if w.deadline != nil {
		return w.deadline(d), func() {}
	}
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}
