package telemetry

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"
)

// DefaultLogQueue is the number of lines an AsyncWriter holds when its
// queue length is not given.
const DefaultLogQueue = 8192

// maxBatch is the most bytes an AsyncWriter hands to its destination in one
// Write; the queued lines it writes at once stop at the line that crosses it.
const maxBatch = 64 << 10

// maxPooledLine is the largest line buffer kept for reuse; larger ones
// (a huge operational record) are left to the garbage collector.
const maxPooledLine = 4 << 10

// AsyncWriter writes whole log lines to a destination from one goroutine,
// gathering the lines queued meanwhile into one Write, so that a request
// never waits on the log's destination (a slow terminal, a full pipe).
//
// TryWrite, for lines that may be lost under pressure (access lines),
// queues; its queue is bounded, and when it is full the line is dropped and
// counted, never waited for. Write, for operational lines that must not be
// lost, writes to the destination at once, synchronously. Every Write to the
// destination is serialised, so a destination shared by both kinds never
// sees two lines interleaved; queued lines keep their order among
// themselves. Errors from the destination are not reported (there is
// nowhere to log them); the lines of a failed Write are lost.
//
// Close flushes every queued line and stops the goroutine; lines written
// after Close go to the destination directly. Safe for concurrent use.
type AsyncWriter struct {
	dst     io.Writer
	queue   chan *[]byte
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
// (queue <= 0 means DefaultLogQueue).
func NewAsyncWriter(dst io.Writer, queue int) *AsyncWriter {
	if queue <= 0 {
		queue = DefaultLogQueue
	}
	w := &AsyncWriter{dst: dst, queue: make(chan *[]byte, queue), done: make(chan struct{})}
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
	close(w.queue)
	w.mu.Unlock()
	<-w.done
	return nil
}

// run writes queued lines until the queue is closed and drained.
func (w *AsyncWriter) run() {
	defer close(w.done)
	batch := make([]byte, 0, maxBatch)
	for b := range w.queue {
		batch = appendLine(batch[:0], b)
		// Gather what else is already queued, up to maxBatch bytes.
	gather:
		for len(batch) < maxBatch {
			select {
			case b, ok := <-w.queue:
				if !ok {
					break gather
				}
				batch = appendLine(batch, b)
			default:
				break gather
			}
		}
		w.direct.Lock()
		_, _ = w.dst.Write(batch)
		w.direct.Unlock()
	}
}

// copyLine returns a pooled buffer holding a copy of p.
func copyLine(p []byte) *[]byte {
	b := linePool.Get().(*[]byte)
	*b = append((*b)[:0], p...)
	return b
}

// appendLine appends *b to batch and recycles b.
func appendLine(batch []byte, b *[]byte) []byte {
	batch = append(batch, *b...)
	if cap(*b) <= maxPooledLine {
		linePool.Put(b)
	}
	return batch
}
