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

// DefaultOperationalQueue is the number of operational lines an
// AsyncWriter holds once QueueWrites has been called (they are
// rate-limited, so few are ever queued at once).
const DefaultOperationalQueue = 1024

// AsyncWriter writes whole log lines to a destination from one goroutine,
// gathering the lines queued over a short interval into one Write, so that
// a request never waits on the log's destination (a slow terminal, a full
// pipe) and a busy gateway makes one write, and one wake-up of the writer,
// per interval rather than per request.
//
// TryWrite, for access lines, queues; its queue is bounded, and when it is
// full the line is dropped and counted, never waited for. The writer sleeps
// until a line is queued after an idle spell, waits the flush interval from
// then, and writes every line queued by the end of it, in Writes of about
// 64 KiB at most; lines queued during the wait wake nothing. A queued line
// therefore reaches the destination at most one flush interval after it
// was queued, plus the time the destination takes over the Writes under
// way then and over the lines queued ahead of it; sooner when the queue is
// more than half full, as the TryWrite (or, for the operational queue, the
// Write) that finds it so cuts the wait short.
//
// Write, for operational lines (the slog handler's), writes to the
// destination at once, synchronously, until QueueWrites is called: the
// lines of a start (a config error, the start announcement) are not lost
// to a queue, and one may precede access lines queued before it. Such a
// Write waits at most StartWriteTimeout; once one has timed out, later
// ones are dropped and counted until its Write returns (see writeNow), so
// that a destination stuck before the start delays it by that bound only. After QueueWrites,
// Write queues too, in a queue of its own of DefaultOperationalQueue lines,
// so that access lines never crowd operational ones out, and drops and
// counts a line when that queue is full: from then on no line waits on the
// destination. Queued lines are written in the order they were queued, the
// two kinds together: an operational line after every access line queued
// before it began (lines queued at once from several goroutines have no
// order to keep).
// Every Write to the destination is serialised, so a destination shared by
// both kinds never sees two lines interleaved. Errors from the destination
// are not reported (there is nowhere to log them); the lines of a failed
// Write are lost.
//
// Close flushes every queued line at once, without waiting for the rest of
// the interval, and stops the goroutine, but gives up after a bound when
// the destination does not read (see CloseWithin). Safe for concurrent use.
type AsyncWriter struct {
	dst   io.Writer
	queue chan *[]byte // access lines (TryWrite)
	ops   chan opLine  // operational lines (Write after QueueWrites)
	// queued is the number of access lines queued since the start; an
	// operational line is written after that many access lines.
	queued atomic.Uint64
	// nudge, 1-buffered, ends the writer's wait: sent to when either queue
	// is more than half full, closed by Close.
	nudge    chan struct{}
	interval time.Duration // the writer's wait; 0: none
	// after, when not nil, stands in for the writer's timer: it returns a
	// channel that receives once the given time has passed.
	after func(time.Duration) <-chan time.Time
	// deadline, when not nil, stands in for Close's timer, and for the
	// bound of a Write before QueueWrites, in the same way.
	deadline func(time.Duration) <-chan time.Time

	dropped    atomic.Uint64 // access lines dropped
	droppedOps atomic.Uint64 // operational lines dropped
	queueOps   atomic.Bool   // Write queues (QueueWrites was called)
	// held is the number of lines the writer has taken from the queues and
	// not yet handed to the destination (or had it return from).
	held atomic.Int64
	// abandoned is set by a Close that gave up on the writer.
	abandoned atomic.Bool
	done      chan struct{}
	// pending is the writer goroutine's own: the operational lines of the
	// flush under way.
	pending []opLine

	// mu guards closed; writers hold it shared while queueing so that Close
	// (exclusive) knows no line is on its way into a queue it drains.
	mu     sync.RWMutex
	closed bool
	direct sync.Mutex // serialises every write to dst
	// startStuck is the Write made before QueueWrites that outlived
	// StartWriteTimeout and has not returned (nil: none); guarded by
	// startMu. See writeNow.
	startMu    sync.Mutex
	startStuck *startWrite
}

// opLine is a queued operational line and the number of access lines
// queued before it, which are written ahead of it.
type opLine struct {
	b     *[]byte
	after uint64
}

// linePool recycles line buffers between the request goroutines that fill
// them and the goroutine that writes them.
var linePool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// NewAsyncWriter starts a writer to dst holding at most queue access lines
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
		ops:      make(chan opLine, DefaultOperationalQueue),
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
// After Close it writes line directly if Close flushed everything, and
// otherwise drops and counts it.
func (w *AsyncWriter) TryWrite(line []byte) bool {
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		_, err := w.writeClosed(line, &w.dropped)
		return !errors.Is(err, ErrLineDropped)
	}
	b := copyLine(line)
	select {
	case w.queue <- b:
		w.queued.Add(1)
		if len(w.queue) > cap(w.queue)/2 {
			w.wake()
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

// ErrLineDropped is what Write returns for a line it dropped: its queue
// was full, or Close gave up on the destination.
var ErrLineDropped = errors.New("telemetry: log line dropped")

// Write writes p (whole lines) for an slog handler sharing the destination
// with the access lines. Until QueueWrites it writes p to the destination
// now, between two batches of queued lines, and returns what the
// destination returned, or, past StartWriteTimeout, ErrStartWriteTimeout
// (and, while that Write has not returned, drops and counts p: 0 and
// ErrLineDropped). After QueueWrites it queues a copy of p and
// returns len(p), or, when the operational queue is full, drops p, counts
// it in Drops().Operational and returns 0 and ErrLineDropped. After Close
// it writes p directly if Close flushed everything, and otherwise drops
// and counts it (also before QueueWrites: the destination that Close gave
// up on is not waited for again).
func (w *AsyncWriter) Write(p []byte) (int, error) {
	if !w.queueOps.Load() && !w.abandoned.Load() {
		return w.writeNow(p)
	}
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		return w.writeClosed(p, &w.droppedOps)
	}
	o := opLine{b: copyLine(p), after: w.queued.Load()}
	select {
	case w.ops <- o:
		if len(w.ops) > cap(w.ops)/2 {
			w.wake()
		}
		w.mu.RUnlock()
		return len(p), nil
	default:
		w.mu.RUnlock()
		linePool.Put(o.b)
		w.droppedOps.Add(1)
		return 0, ErrLineDropped
	}
}

// wake ends the writer's wait, unless it has been nudged already; called
// with mu held shared, so not after Close has closed nudge.
func (w *AsyncWriter) wake() {
	select {
	case w.nudge <- struct{}{}:
	default: // already nudged
	}
}

// QueueWrites makes Write queue from now on rather than write at once: the
// gateway calls it once it has started, so that no line written after that
// waits on the destination. It cannot be undone.
func (w *AsyncWriter) QueueWrites() { w.queueOps.Store(true) }

// Dropped is the number of lines TryWrite has dropped since the start.
func (w *AsyncWriter) Dropped() uint64 { return w.dropped.Load() }

// LogDrops counts the lines a log lost, by kind, since the start.
type LogDrops struct {
	Access      uint64 // access lines (TryWrite)
	Operational uint64 // operational lines (Write after QueueWrites)
}

// Drops is the number of lines dropped since the start, by kind: because
// their queue was full, or written after a Close that gave up.
func (w *AsyncWriter) Drops() LogDrops {
	return LogDrops{Access: w.dropped.Load(), Operational: w.droppedOps.Load()}
}

// run writes queued lines, a flush interval after the first of each busy
// spell, until both queues are closed and drained.
func (w *AsyncWriter) run() {
	defer close(w.done)
	f := flushing{w: w, batch: make([]byte, 0, maxBatch)}
	var timer *time.Timer
	access, ops := w.queue, w.ops
	for access != nil || ops != nil {
		var first *[]byte
		var firstOp opLine
		select {
		case b, ok := <-access:
			if !ok {
				access = nil
				continue
			}
			first = b
		case o, ok := <-ops:
			if !ok {
				ops = nil
				continue
			}
			firstOp = o
		}
		w.held.Add(1)
		if w.interval > 0 {
			timer = w.wait(timer)
		}
		// A nudge sent before this flush is answered by it. (Once Close
		// has closed nudge, this and every wait return at once.)
		select {
		case <-w.nudge:
		default:
		}
		f.flush(first, firstOp)
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

// flushing is the writer goroutine's state between flushes.
type flushing struct {
	w     *AsyncWriter
	batch []byte // lines not yet handed to the destination
	lines int    // in batch
	taken uint64 // access lines taken from the queue since the start
}

// flush writes the line the writer took first (an access line first, or
// else the operational line firstOp) and every other line queued when it
// starts, in the order they were queued (see opLine), in Writes that stop
// at the line that crosses maxBatch bytes. Lines queued meanwhile wait for
// the next flush.
func (f *flushing) flush(first *[]byte, firstOp opLine) {
	w := f.w
	if first != nil {
		f.add(first)
		f.taken++
	}
	// The goroutine running flush is the queues' only receiver, so the
	// lines queued now are there to take without blocking, even after
	// Close has closed the queues; only a Close that gave up on this
	// goroutine takes them too, and then a queue may run dry early. The
	// operational lines are counted first: the access lines queued before
	// them are then in the access queue's count.
	ops := w.pending[:0]
	if firstOp.b != nil {
		ops = append(ops, firstOp)
	}
	for n := len(w.ops); n > 0; n-- {
		o, ok := <-w.ops
		if !ok {
			break
		}
		w.held.Add(1)
		ops = append(ops, o)
	}
	access := len(w.queue)
	for _, o := range ops {
		for ; access > 0 && f.taken < o.after; access-- {
			if !f.takeAccess() {
				access = 0
			}
		}
		f.add(o.b)
	}
	for ; access > 0; access-- {
		if !f.takeAccess() {
			break
		}
	}
	clear(ops)
	w.pending = ops[:0]
	w.write(f.batch, f.lines)
	f.batch, f.lines = f.batch[:0], 0
}

// takeAccess adds the next queued access line to the batch; false when
// the queue was closed and empty.
func (f *flushing) takeAccess() bool {
	b, ok := <-f.w.queue
	if !ok {
		return false
	}
	f.w.held.Add(1)
	f.taken++
	f.add(b)
	return true
}

// add appends the line b (recycled here) to the batch, first handing the
// batch to the destination when it holds maxBatch bytes or more.
func (f *flushing) add(b *[]byte) {
	if len(f.batch) >= maxBatch {
		f.w.write(f.batch, f.lines)
		f.batch, f.lines = f.batch[:0], 0
	}
	f.batch = append(f.batch, *b...)
	f.lines++
	recycle(b)
}

// write hands batch, of lines lines, to the destination, between
// operational lines written directly.
func (w *AsyncWriter) write(batch []byte, lines int) {
	w.direct.Lock()
	_, _ = w.dst.Write(batch)
	w.direct.Unlock()
	w.held.Add(-int64(lines))
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
