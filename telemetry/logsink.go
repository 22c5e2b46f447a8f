package telemetry

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultLogLines is the number of access lines a LogSink holds while its
// destination writes; operational lines have OperationalLines more.
const DefaultLogLines = 8192

// OperationalLines is the room a LogSink keeps for operational lines
// beyond its access lines: a flood of requests never crowds a warning out.
const OperationalLines = 1024

// FlushInterval is how long a LogSink's writer lets lines gather after
// the first one of a quiet spell before it writes them: a busy process
// makes one write, and wakes the writer once, per interval rather than
// per line. A buffer more than half full is written at once.
const FlushInterval = 10 * time.Millisecond

// StallTimeout is how long a Write to a LogSink's destination may take
// before the sink counts the destination as stalled (a log reader that
// hung): from then until that Write returns, new lines are dropped and
// counted. It also bounds Close.
const StallTimeout = 2 * time.Second

// LogDrops counts the lines a log lost, by kind, since the start.
type LogDrops struct {
	Access      uint64 // access lines
	Operational uint64 // operational lines
}

// LogSink is the one destination of the process's log lines: the slog
// handlers of NewLogger write whole lines to it (operational lines through
// the sink itself, access lines through Access), and one goroutine writes
// them to dst in the order they came, everything buffered FlushInterval
// after the first line at once, so that lines never interleave and a busy
// process makes one write per interval.
// A line is dropped and counted, never waited for, when its room in the
// buffer is full (DefaultLogLines access lines or more, or OperationalLines
// more for an operational line) or while dst is stalled (a Write under way
// for StallTimeout). The one exception is the start: until Started, an
// operational line waits until it has been written, or until dst stalls,
// so that a start's errors reach stderr before the process acts on them.
// Errors of dst are not reported (there is nowhere to log them). Safe for
// concurrent use.
type LogSink struct {
	dst     io.Writer
	limit   int // access lines held at most
	started atomic.Bool
	dropped [2]atomic.Uint64 // by kind: access, operational

	mu      sync.Mutex
	buf     []byte        // lines not yet taken by the writer
	lines   int           // in buf
	queued  uint64        // lines buffered since the start
	written uint64        // lines whose Write has returned
	since   time.Time     // when the Write under way began; zero: none
	flushed chan struct{} // closed, and replaced, when a Write returns
	closed  bool

	wake  chan struct{} // 1-buffered: buf has lines, or Close was called
	nudge chan struct{} // 1-buffered: write now (buf half full, or Close)
	done  chan struct{} // closed when the writer has returned
}

const (
	kindAccess = iota
	kindOperational
)

// NewLogSink starts the writer of a sink to dst that holds at most lines
// access lines (DefaultLogLines when lines <= 0).
func NewLogSink(dst io.Writer, lines int) *LogSink {
	if lines <= 0 {
		lines = DefaultLogLines
	}
	s := &LogSink{dst: dst, limit: lines, flushed: make(chan struct{}),
		wake: make(chan struct{}, 1), nudge: make(chan struct{}, 1), done: make(chan struct{})}
	go s.run()
	return s
}

// Write buffers p, one whole operational line, and returns len(p); or,
// when it is dropped, 0 and ErrLineDropped. Before Started it returns once
// p has been written (at once, without FlushInterval's wait), or once dst
// has stalled (the line then stays buffered).
func (s *LogSink) Write(p []byte) (int, error) {
	seq, ok := s.add(p, kindOperational)
	if !ok {
		return 0, ErrLineDropped
	}
	if !s.started.Load() {
		signal(s.nudge) // a start's line is written at once
		s.waitWritten(seq)
	}
	return len(p), nil
}

// Access is the writer of access lines: Write buffers a whole line, or
// drops and counts it, and never waits.
func (s *LogSink) Access() io.Writer { return accessWriter{s} }

type accessWriter struct{ s *LogSink }

func (w accessWriter) Write(p []byte) (int, error) {
	if _, ok := w.s.add(p, kindAccess); !ok {
		return 0, ErrLineDropped
	}
	return len(p), nil
}

// Started ends the start: operational lines no longer wait to be written.
func (s *LogSink) Started() { s.started.Store(true) }

// Drops is the number of lines dropped since the start, by kind.
func (s *LogSink) Drops() LogDrops {
	return LogDrops{Access: s.dropped[kindAccess].Load(), Operational: s.dropped[kindOperational].Load()}
}

// ErrLineDropped is what a Write returns for a line it dropped.
var ErrLineDropped = errors.New("telemetry: log line dropped")

// add buffers line of kind and returns its sequence number, or counts it
// dropped and returns false.
func (s *LogSink) add(line []byte, kind int) (uint64, bool) {
	room := s.limit
	if kind == kindOperational {
		room += OperationalLines
	}
	s.mu.Lock()
	if s.closed || s.lines >= room || !s.since.IsZero() && time.Since(s.since) >= StallTimeout {
		s.mu.Unlock()
		s.dropped[kind].Add(1)
		return 0, false
	}
	s.buf = append(s.buf, line...)
	s.lines++
	s.queued++
	seq, full := s.queued, s.lines > s.limit/2
	s.mu.Unlock()
	signal(s.wake)
	if full {
		signal(s.nudge)
	}
	return seq, true
}

// waitWritten returns once line seq has been written, or once the Write
// under way has lasted StallTimeout.
func (s *LogSink) waitWritten(seq uint64) {
	for {
		s.mu.Lock()
		done, since, flushed := s.written >= seq, s.since, s.flushed
		s.mu.Unlock()
		if done {
			return
		}
		left := StallTimeout // the writer has yet to take the line
		if !since.IsZero() {
			if left -= time.Since(since); left <= 0 {
				return
			}
		}
		t := time.NewTimer(left)
		select {
		case <-flushed:
		case <-t.C:
		}
		t.Stop()
	}
}

// signal sends on c, 1-buffered, unless a send is pending already.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// run writes what is buffered, FlushInterval after a line comes (at once
// when nudged), until Close.
func (s *LogSink) run() {
	defer close(s.done)
	var spare []byte
	t := time.NewTimer(FlushInterval)
	t.Stop()
	for range s.wake {
		t.Reset(FlushInterval)
		select {
		case <-t.C:
		case <-s.nudge:
			t.Stop()
		}
		s.mu.Lock()
		b, n, closed := s.buf, s.lines, s.closed
		s.buf, s.lines = spare[:0], 0
		if n > 0 {
			s.since = time.Now()
		}
		s.mu.Unlock()
		if n > 0 {
			_, _ = s.dst.Write(b)
			s.mu.Lock()
			s.written += uint64(n)
			s.since = time.Time{}
			close(s.flushed)
			s.flushed = make(chan struct{})
			s.mu.Unlock()
		}
		if spare = b; cap(spare) > 1<<20 { // a burst's buffer is not kept
			spare = nil
		}
		if closed {
			return
		}
	}
}

// Close writes what is buffered and stops the writer, waiting at most
// StallTimeout for dst; it returns an error counting the lines left
// unwritten when dst did not take them in time. Lines written after Close
// are dropped and counted. A second Close returns an error.
func (s *LogSink) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("telemetry: LogSink already closed")
	}
	s.closed = true
	s.mu.Unlock()
	signal(s.wake)
	signal(s.nudge)
	t := time.NewTimer(StallTimeout)
	defer t.Stop()
	select {
	case <-s.done:
		return nil
	case <-t.C:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Errorf("telemetry: the log's destination took no lines for %v; %d lines lost", StallTimeout, s.queued-s.written)
}
