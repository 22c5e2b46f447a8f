package telemetry

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultLogQueue is the number of lines an AsyncWriter holds when its
// queue length is not given.
const DefaultLogQueue = 8192

// DefaultFlushInterval is how long NewAsyncWriter's writer lets access
// lines gather before it writes them.
const DefaultFlushInterval = 10 * time.Millisecond

// maxBatch is the most bytes an AsyncWriter hands to its destination in one
// Write; the queued lines it writes at once stop at the line that crosses it.
const maxBatch = 64 << 10

// maxPooledLine is the largest line buffer kept for reuse; larger ones
// (a huge operational record) are left to the garbage collector.
const maxPooledLine = 4 << 10

// AsyncWriter writes whole log lines to a destination from one goroutine,
// gathering the lines queued over a short interval into one Write, so that
// a request never waits on the log's destination (a slow terminal, a full
// pipe) and a busy gateway makes one write, and one wake-up of the writer,
// per interval rather than per request.
//
// TryWrite, for lines that may be lost under pressure (access lines),
// queues; its queue is bounded, and when it is full the line is dropped and
// counted, never waited for. The writer sleeps until a line is queued after
// an idle spell, waits the flush interval from then, and writes every line
// queued by the end of it, in Writes of about 64 KiB at most; lines queued
// during the wait wake nothing. A queued line therefore reaches the
// destination at most one flush interval after it was queued, plus the
// time the destination takes over the Writes under way then and over the
// lines queued ahead of it; sooner when the queue is more than half full,
// as the TryWrite that finds it so cuts the wait short.
//
// Write, for operational lines that must not be lost, writes to the
// destination at once, synchronously: an operational line may therefore
// precede access lines queued before it. Every Write to the destination is
// serialised, so a destination shared by both kinds never sees two lines
// interleaved; queued lines keep their order among themselves. Errors from
// the destination are not reported (there is nowhere to log them); the
// lines of a failed Write are lost.
//
// Close flushes every queued line at once, without waiting for the rest of
// the interval, and stops the goroutine; lines written after Close go to
// the destination directly. Safe for concurrent use.
type AsyncWriter struct {
	dst   io.Writer
	queue chan *[]byte
	half  int // a TryWrite that leaves more lines queued nudges the writer
	// nudge, 1-buffered, ends the writer's wait: sent to when the queue is
	// more than half full, closed by Close.
	nudge    chan struct{}
	interval time.Duration // the writer's wait; 0: none
	// after, when not nil, stands in for the writer's timer: it returns a
	// channel that receives once the given time has passed.
	after   func(time.Duration) <-chan time.Time
	dropped atomic.Uint64
	done    chan struct{}

	// mu guards closed; writers hold it shared while queueing so that Close
	// (exclusive) knows no line is on its way into a queue it drains.
	mu     sync.RWMutex
	closed bool
	direct sync.Mutex // serialises every write to dst
}

// linePool recycles line buffers between the request goroutines that fill
// them and the goroutine that writes them.
var linePool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// NewAsyncWriter starts a writer to dst holding at most queue lines
// (queue <= 0 means DefaultLogQueue) and writing them DefaultFlushInterval
// (10 ms) after the first line of each busy spell.
func NewAsyncWriter(dst io.Writer, queue int) *AsyncWriter {
	return NewAsyncWriterInterval(dst, queue, DefaultFlushInterval)
}

// NewAsyncWriterInterval is NewAsyncWriter with a flush interval: the wall
// time the writer waits, from the first line queued after an idle spell,
// before it writes what is queued (at most about that long a line waits,
// see AsyncWriter). An interval of 0 or less means no wait: lines are
// written as soon as the writer gets to them, waking it for nearly every
// line when lines come slower than it writes them.
func NewAsyncWriterInterval(dst io.Writer, queue int, interval time.Duration) *AsyncWriter {
	return newAsyncWriter(dst, queue, interval, nil)
}

// newAsyncWriter starts the writer; after, when not nil, stands in for its
// timer.
func newAsyncWriter(dst io.Writer, queue int, interval time.Duration, after func(time.Duration) <-chan time.Time) *AsyncWriter {
	if queue <= 0 {
		queue = DefaultLogQueue
	}
	w := &AsyncWriter{
		dst:      dst,
		queue:    make(chan *[]byte, queue),
		half:     queue / 2,
		nudge:    make(chan struct{}, 1),
		interval: max(interval, 0),
		after:    after,
		done:     make(chan struct{}),
	}
	go w.run()
	return w
}

// TryWrite queues a copy of line (one or more whole lines, each ending in
// a newline) and reports true, or, when the queue is full, drops it, counts
// it in Dropped and reports false. It never blocks on the destination.
func (w *AsyncWriter) TryWrite(line []byte) bool {
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		_, _ = w.Write(line)
		return true
	}
	b := copyLine(line)
	select {
	case w.queue <- b:
		if len(w.queue) > w.half {
			select {
			case w.nudge <- struct{}{}:
			default: // already nudged
			}
		}
		w.mu.RUnlock()
		return true
	default:
		w.mu.RUnlock()
		linePool.Put(b)
		w.dropped.Add(1)
		return false
	}
}

// Write writes p to the destination now, between two batches of queued
// lines, and returns what the destination returned. It is what an slog
// handler sharing the destination writes through.
func (w *AsyncWriter) Write(p []byte) (int, error) {
	w.direct.Lock()
	defer w.direct.Unlock()
	return w.dst.Write(p)
}

// Dropped is the number of lines TryWrite has dropped since the start.
func (w *AsyncWriter) Dropped() uint64 { return w.dropped.Load() }

// errClosed is what a second Close returns.
var errClosed = errors.New("telemetry: AsyncWriter already closed")

// Close writes every queued line to the destination, stops the writing
// goroutine and returns once both are done. Later lines are written
// directly. A second Close returns an error and does nothing.
func (w *AsyncWriter) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return errClosed
	}
	w.closed = true
	close(w.nudge) // no TryWrite sends to it from now on
	close(w.queue)
	w.mu.Unlock()
	<-w.done
	return nil
}

// run writes queued lines, a flush interval after the first of each busy
// spell, until the queue is closed and drained.
func (w *AsyncWriter) run() {
	defer close(w.done)
	batch := make([]byte, 0, maxBatch)
	var timer *time.Timer
	for {
		first, ok := <-w.queue
		if !ok {
			return
		}
		if w.interval > 0 {
			timer = w.wait(timer)
		}
		// A nudge sent before this flush is answered by it. (Once Close
		// has closed nudge, this and every wait return at once.)
		select {
		case <-w.nudge:
		default:
		}
		batch = w.flush(append(batch[:0], (*first)...), first)
	}
}

// wait returns once the flush interval has passed, or sooner when nudged.
// t is the timer of the previous wait (nil at first), reset and returned.
func (w *AsyncWriter) wait(t *time.Timer) *time.Timer {
	var elapsed <-chan time.Time
	switch {
	case w.after != nil:
		elapsed = w.after(w.interval)
	case t == nil:
		t = time.NewTimer(w.interval)
		elapsed = t.C
	default:
		t.Reset(w.interval)
		elapsed = t.C
	}
	select {
	case <-elapsed:
	case <-w.nudge:
		if t != nil {
			t.Stop()
		}
	}
	return t
}

// flush writes batch, which holds the line first (recycled here), and then
// every other line queued when it starts, in Writes that stop at the line
// that crosses maxBatch bytes, and returns batch's buffer. Lines queued
// meanwhile wait for the next flush.
func (w *AsyncWriter) flush(batch []byte, first *[]byte) []byte {
	recycle(first)
	// The goroutine running flush is the queue's only receiver, so the n
	// lines queued now are there to take without blocking, even after
	// Close has closed the queue.
	for n := len(w.queue); n > 0; n-- {
		if len(batch) >= maxBatch {
			w.write(batch)
			batch = batch[:0]
		}
		b := <-w.queue
		batch = append(batch, *b...)
		recycle(b)
	}
	w.write(batch)
	return batch[:0]
}

// write hands batch to the destination, between operational lines.
func (w *AsyncWriter) write(batch []byte) {
	w.direct.Lock()
	_, _ = w.dst.Write(batch)
	w.direct.Unlock()
}

// copyLine returns a pooled buffer holding a copy of p.
func copyLine(p []byte) *[]byte {
	b := linePool.Get().(*[]byte)
	*b = append((*b)[:0], p...)
	return b
}

// recycle returns b to linePool unless it grew too large to keep.
func recycle(b *[]byte) {
	if cap(*b) <= maxPooledLine {
		linePool.Put(b)
	}
}
