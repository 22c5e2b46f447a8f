package telemetry

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// gate is a destination whose Writes block until it is opened; it keeps
// what it was given.
type gate struct {
	open chan struct{}
	mu   sync.Mutex
	buf  bytes.Buffer
}

func newGate() *gate { return &gate{open: make(chan struct{})} }

func (g *gate) Write(p []byte) (int, error) {
	<-g.open
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.Write(p)
}

func (g *gate) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.String()
}

// TestLogSinkWaitsTheFlushInterval: a line reaches the destination
// FlushInterval after it was written, with the lines written meanwhile,
// in one Write; at once when the buffer is more than half full.
func TestLogSinkWaitsTheFlushInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var writes countingWriter
		s := NewLogSink(&writes, 4)
		s.Started()
		s.Access().Write([]byte("a\n"))
		time.Sleep(FlushInterval / 2)
		s.Access().Write([]byte("b\n"))
		synctest.Wait()
		if n := writes.n.Load(); n != 0 {
			t.Fatalf("%d writes before FlushInterval, want none", n)
		}
		time.Sleep(FlushInterval / 2)
		synctest.Wait()
		if n := writes.n.Load(); n != 1 {
			t.Fatalf("%d writes after FlushInterval, want the two lines in one", n)
		}
		for _, l := range []string{"c\n", "d\n", "e\n"} { // the third makes the buffer more than half full
			s.Access().Write([]byte(l))
		}
		synctest.Wait()
		if n := writes.n.Load(); n != 2 {
			t.Fatalf("%d writes with the buffer half full, want one more at once", n)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// countingWriter counts its Writes.
type countingWriter struct{ n atomic.Int64 }

func (c *countingWriter) Write(p []byte) (int, error) { c.n.Add(1); return len(p), nil }

// TestLogSinkKeepsOrderAndWholeLines: lines written at once from several
// goroutines, access and operational, all reach the destination whole,
// each goroutine's in the order it wrote them, by the time Close returns.
func TestLogSinkKeepsOrderAndWholeLines(t *testing.T) {
	var out lockedBuffer
	s := NewLogSink(&out, 0)
	s.Started()
	const writers, each = 4, 500
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				line := fmt.Appendf(nil, "w%d %04d %s\n", w, i, strings.Repeat("x", i%50))
				var err error
				if i%2 == 0 {
					_, err = s.Access().Write(line)
				} else {
					_, err = s.Write(line)
				}
				if err != nil {
					t.Errorf("line %d of writer %d: %v", i, w, err)
				}
			}
		})
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	next := make([]int, writers)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	for _, l := range lines {
		var w, i int
		if _, err := fmt.Sscanf(l, "w%d %04d", &w, &i); err != nil || i != next[w] || l != fmt.Sprintf("w%d %04d %s", w, i, strings.Repeat("x", i%50)) {
			t.Fatalf("line %q: want writer %d's line %d, whole", l, w, next[w])
		}
		next[w]++
	}
	if len(lines) != writers*each || s.Drops() != (LogDrops{}) {
		t.Fatalf("%d lines, drops %+v; want %d and none", len(lines), s.Drops(), writers*each)
	}
}

// TestLogSinkDropsWhenFull: while the destination takes nothing, the sink
// holds its access lines and OperationalLines more operational ones, then
// drops and counts each kind; what it held is written once the
// destination reads again.
func TestLogSinkDropsWhenFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dst := newGate()
		s := NewLogSink(dst, 3)
		s.Started()
		s.Access().Write([]byte("first\n")) // taken by the writer, which blocks in dst
		time.Sleep(FlushInterval)
		synctest.Wait()
		for i := range 4 {
			_, err := s.Access().Write(fmt.Appendf(nil, "a%d\n", i))
			if want := i == 3; (err != nil) != want {
				t.Fatalf("access line %d: %v, want dropped %v (3 held)", i, err, want)
			}
		}
		for i := range OperationalLines + 1 {
			_, err := s.Write(fmt.Appendf(nil, "o%d\n", i))
			if want := i == OperationalLines; (err != nil) != want {
				t.Fatalf("operational line %d: %v, want dropped %v", i, err, want)
			}
		}
		if d := s.Drops(); d != (LogDrops{Access: 1, Operational: 1}) {
			t.Fatalf("drops %+v, want one of each kind", d)
		}
		close(dst.open)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		out := dst.String()
		if !strings.HasPrefix(out, "first\na0\na1\na2\no0\n") || strings.Count(out, "\n") != 4+OperationalLines {
			t.Fatalf("written %d lines starting %q, want first, a0-a2 and the operational lines", strings.Count(out, "\n"), out[:min(len(out), 40)])
		}
	})
}

// TestLogSinkDropsWhileStalled: once a Write to the destination has been
// under way for StallTimeout, lines are dropped and counted rather than
// held, until it returns.
func TestLogSinkDropsWhileStalled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dst := newGate()
		s := NewLogSink(dst, 0)
		s.Started()
		s.Access().Write([]byte("first\n"))
		time.Sleep(FlushInterval) // the writer takes it, and blocks in dst
		synctest.Wait()
		time.Sleep(StallTimeout - time.Millisecond)
		if _, err := s.Access().Write([]byte("held\n")); err != nil {
			t.Fatalf("a line before the stall: %v, want held", err)
		}
		time.Sleep(time.Millisecond)
		if _, err := s.Access().Write([]byte("dropped\n")); err == nil {
			t.Fatal("a line once stalled was held, want dropped")
		}
		if _, err := s.Write([]byte("dropped too\n")); err == nil {
			t.Fatal("an operational line once stalled was held, want dropped")
		}
		close(dst.open)
		synctest.Wait()
		if _, err := s.Access().Write([]byte("after\n")); err != nil {
			t.Fatalf("a line once the destination read again: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if out := dst.String(); out != "first\nheld\nafter\n" || s.Drops() != (LogDrops{Access: 1, Operational: 1}) {
			t.Fatalf("written %q, drops %+v", out, s.Drops())
		}
	})
}

// TestLogSinkStart: before Started an operational line returns once it is
// written; a destination stuck at the start holds a line StallTimeout, and
// the next one not at all (dropped and counted), and Close gives up after
// StallTimeout, counting what was left.
func TestLogSinkStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out lockedBuffer
		s := NewLogSink(&out, 0)
		s.Write([]byte("config ok\n"))
		if out.String() != "config ok\n" {
			t.Fatalf("before Started, Write returned with %q written, want its line", out.String())
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}

		dst := newGate()
		s = NewLogSink(dst, 0)
		start := time.Now()
		if _, err := s.Write([]byte("stuck\n")); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited != StallTimeout {
			t.Fatalf("the first line waited %v, want StallTimeout", waited)
		}
		start = time.Now()
		if _, err := s.Write([]byte("next\n")); err == nil || time.Since(start) != 0 {
			t.Fatalf("the next line: %v after %v, want dropped at once", err, time.Since(start))
		}
		if d := s.Drops(); d != (LogDrops{Operational: 1}) {
			t.Fatalf("drops %+v, want 1 operational", d)
		}
		start = time.Now()
		if err := s.Close(); err == nil || time.Since(start) != StallTimeout {
			t.Fatalf("Close with the destination stuck: %v after %v, want an error after StallTimeout", err, time.Since(start))
		}
		close(dst.open)
	})
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
