package telemetry

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
)

// countingWriter counts the Writes it passes on to w.
type countingWriter struct {
	w      io.Writer
	writes atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.w.Write(p)
}

// deadline bounds every wait of these tests for the writer's goroutine:
// generous on a loaded machine, and reported as a missed deadline.
const deadline = 30 * time.Second

// chanWriter hands a copy of each Write to writes.
type chanWriter struct{ writes chan string }

func (c chanWriter) Write(p []byte) (int, error) {
	c.writes <- string(p)
	return len(p), nil
}

// manualTimer stands in for an AsyncWriter's timer: waits receives the
// interval of each wait the writer starts, and the wait ends when the test
// sends on fire (or never).
type manualTimer struct {
	waits chan time.Duration
	fire  chan time.Time
}

func newManualTimer() *manualTimer {
	return &manualTimer{waits: make(chan time.Duration, 100), fire: make(chan time.Time)}
}

func (m *manualTimer) after(d time.Duration) <-chan time.Time {
	m.waits <- d
	return m.fire
}

// waitStarted waits until the writer has begun a wait of d.
func (m *manualTimer) waitStarted(t *testing.T, d time.Duration) {
	t.Helper()
	if got := await(t, m.waits, "the writer began no wait"); got != d {
		t.Fatalf("the writer waits %v, want %v", got, d)
	}
}

// elapse ends the writer's wait.
func (m *manualTimer) elapse(t *testing.T) {
	t.Helper()
	select {
	case m.fire <- time.Time{}:
	case <-time.After(deadline):
		proctest.FatalOverrun(t, "the writer was not waiting on its timer within %v", deadline)
	}
}

// await returns what c delivers, or ends t as a missed deadline (not a
// wrong answer) when nothing has arrived within deadline; missing says
// what did not happen then ("nothing written").
func await[T any](t *testing.T, c <-chan T, missing string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(deadline):
		proctest.FatalOverrun(t, "%s within %v", missing, deadline)
		var zero T
		return zero
	}
}

// nextWrite returns the next Write to c.
func nextWrite(t *testing.T, c chanWriter) string {
	t.Helper()
	return await(t, c.writes, "nothing written")
}

// startClose calls w.Close in a goroutine and returns where its result
// arrives.
func startClose(w *AsyncWriter) <-chan error {
	done := make(chan error, 1)
	go func() { done <- w.Close() }()
	return done
}

// closeWithin closes w, failing t if Close has not returned by deadline.
func closeWithin(t *testing.T, w *AsyncWriter) {
	t.Helper()
	if err := await(t, startClose(w), "Close did not return"); err != nil {
		t.Fatal(err)
	}
}

func numbered(i int) string { return fmt.Sprintf("line %d\n", i) }

// TestAsyncWriterOneWritePerInterval: the lines queued while the writer
// waits out its interval are written together, in one Write, when it ends,
// and nothing is written before.
func TestAsyncWriterOneWritePerInterval(t *testing.T) {
	dst := chanWriter{writes: make(chan string, 100)}
	clock := newManualTimer()
	w := newAsyncWriter(dst, 64, time.Hour, clock.after)
	var want strings.Builder
	for i := range 20 {
		want.WriteString(numbered(i))
		if !w.TryWrite([]byte(numbered(i))) {
			t.Fatalf("line %d dropped", i)
		}
		if i == 0 {
			clock.waitStarted(t, time.Hour) // one wait, from the first line
		}
	}
	if n := len(dst.writes); n != 0 {
		t.Fatalf("%d Writes before the interval ended", n)
	}
	clock.elapse(t)
	if got := nextWrite(t, dst); got != want.String() {
		t.Errorf("first Write %q, want all 20 lines in order", got)
	}
	// A line after the flush starts the next interval.
	w.TryWrite([]byte("next\n"))
	clock.waitStarted(t, time.Hour)
	clock.elapse(t)
	if got := nextWrite(t, dst); got != "next\n" {
		t.Errorf("second Write %q", got)
	}
	closeWithin(t, w)
	if n := len(dst.writes); n != 0 {
		t.Errorf("%d more Writes on Close with nothing queued", n)
	}
}

// TestAsyncWriterBatchesInMaxBatch: a flush of more than maxBatch bytes is
// split into Writes that each stop at the line crossing maxBatch, in order.
func TestAsyncWriterBatchesInMaxBatch(t *testing.T) {
	dst := chanWriter{writes: make(chan string, 100)}
	clock := newManualTimer()
	const lines = 1000 // 300 bytes each: some 4.6 maxBatch
	w := newAsyncWriter(dst, 4*lines, time.Hour, clock.after)
	var want strings.Builder
	for i := range lines {
		line := fmt.Sprintf("%-299d\n", i)
		want.WriteString(line)
		w.TryWrite([]byte(line))
		if i == 0 {
			clock.waitStarted(t, time.Hour)
		}
	}
	clock.elapse(t)
	var got strings.Builder
	writes := 0
	for got.Len() < want.Len() {
		p := nextWrite(t, dst)
		writes++
		if got.Len()+len(p) < want.Len() && (len(p) < maxBatch || len(p) >= maxBatch+300) {
			t.Errorf("Write %d of %d bytes, want the lines up to the one crossing %d", writes, len(p), maxBatch)
		}
		got.WriteString(p)
	}
	if got.String() != want.String() {
		t.Errorf("written lines differ from the queued ones, in order")
	}
	if writes != 5 {
		t.Errorf("%d Writes for %d bytes, want 5", writes, want.Len())
	}
	closeWithin(t, w)
}

// TestAsyncWriterNudgedPastHalf: a TryWrite that leaves the queue more
// than half full ends the writer's wait, so that lines are written rather
// than dropped while the interval runs; one that leaves it half full does
// not.
func TestAsyncWriterNudgedPastHalf(t *testing.T) {
	dst := chanWriter{writes: make(chan string, 100)}
	clock := newManualTimer() // never elapses unless told: an endless interval
	w := newAsyncWriter(dst, 8, time.Hour, clock.after)
	// queue offers lines from to to-1 and returns them; the writer holds
	// the first and waits, the others are queued.
	queue := func(from, to int) string {
		t.Helper()
		var want strings.Builder
		for i := from; i < to; i++ {
			want.WriteString(numbered(i))
			if !w.TryWrite([]byte(numbered(i))) {
				t.Fatalf("line %d dropped", i)
			}
			if i == from {
				clock.waitStarted(t, time.Hour)
			}
		}
		return want.String()
	}
	// Lines 1 to 4 fill the queue of 8 to half: no nudge. A nudge would
	// be pending still, or have ended the wait, so that the writer writes
	// and no longer takes the timer's firing; without one it takes it.
	want := queue(0, 5)
	if len(w.nudge) != 0 {
		t.Fatal("nudged at half full")
	}
	select {
	case clock.fire <- time.Time{}:
	case p := <-dst.writes:
		t.Fatalf("written at half full: %q", p)
	}
	if got := nextWrite(t, dst); got != want {
		t.Errorf("written %q, want lines 0 to 4", got)
	}
	// Line 10 leaves 5 of 8 queued: written with no timer firing.
	want = queue(5, 11)
	if got := nextWrite(t, dst); got != want {
		t.Errorf("written %q, want lines 5 to 10", got)
	}
	if w.Dropped() != 0 {
		t.Errorf("dropped %d", w.Dropped())
	}
	closeWithin(t, w)
}

// TestAsyncWriterOperationalNudgedPastHalf: once Write queues, an
// operational line that leaves its queue more than half full ends the
// writer's wait too, so that a burst of operational lines to a destination
// that reads is written rather than dropped while the interval runs.
func TestAsyncWriterOperationalNudgedPastHalf(t *testing.T) {
	dst := chanWriter{writes: make(chan string, 100)}
	clock := newManualTimer() // never elapses unless told: an endless interval
	w := newAsyncWriter(dst, 8, time.Hour, clock.after)
	w.QueueWrites()
	const n = DefaultOperationalQueue/2 + 2 // the first is held by the writer
	var want strings.Builder
	for i := range n {
		want.WriteString(numbered(i))
		if _, err := w.Write([]byte(numbered(i))); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			clock.waitStarted(t, time.Hour) // the writer holds line 0
		}
	}
	var got string
	for len(got) < want.Len() {
		got += nextWrite(t, dst)
	}
	if got != want.String() {
		t.Errorf("written %d bytes, want lines 0 to %d", len(got), n-1)
	}
	if d := w.Drops(); d.Operational != 0 {
		t.Errorf("dropped %d", d.Operational)
	}
	closeWithin(t, w)
}

// TestAsyncWriterCloseDoesNotWaitForInterval: Close writes what is queued
// at once, in one Write, however long the flush interval (here an hour, on
// the real clock).
func TestAsyncWriterCloseDoesNotWaitForInterval(t *testing.T) {
	var buf bytes.Buffer
	dst := &countingWriter{w: &buf}
	w := NewAsyncWriterInterval(dst, 0, time.Hour)
	var want strings.Builder
	for i := range 100 {
		want.WriteString(numbered(i))
		w.TryWrite([]byte(numbered(i)))
	}
	closeWithin(t, w)
	if buf.String() != want.String() || dst.writes.Load() != 1 {
		t.Errorf("Close wrote %d bytes in %d Writes, want %d in 1", buf.Len(), dst.writes.Load(), want.Len())
	}
}

// TestAsyncWriterWriteDuringInterval: an operational Write goes to the
// destination at once, ahead of the access lines waiting for the interval
// to end, and never inside their Write.
func TestAsyncWriterWriteDuringInterval(t *testing.T) {
	dst := chanWriter{writes: make(chan string, 100)}
	clock := newManualTimer()
	w := newAsyncWriter(dst, 16, time.Hour, clock.after)
	w.TryWrite([]byte("access\n"))
	clock.waitStarted(t, time.Hour)
	if _, err := w.Write([]byte("operational\n")); err != nil {
		t.Fatal(err)
	}
	if len(dst.writes) != 1 || <-dst.writes != "operational\n" {
		t.Fatal("the operational line was not written when Write returned")
	}
	clock.elapse(t)
	if got := nextWrite(t, dst); got != "access\n" {
		t.Errorf("then %q, want the access line", got)
	}
	closeWithin(t, w)
}

// TestAsyncWriterZeroInterval: with an interval of 0 the writer does not
// wait (nor asks its timer), and Close still flushes everything in order.
func TestAsyncWriterZeroInterval(t *testing.T) {
	var buf bytes.Buffer
	clock := newManualTimer()
	w := newAsyncWriter(&buf, 0, 0, clock.after)
	var want strings.Builder
	for i := range 1000 {
		want.WriteString(numbered(i))
		w.TryWrite([]byte(numbered(i)))
	}
	closeWithin(t, w)
	if buf.String() != want.String() {
		t.Errorf("wrote %d bytes, want %d in order", buf.Len(), want.Len())
	}
	if n := len(clock.waits); n != 0 {
		t.Errorf("%d waits with interval 0", n)
	}
}

// BenchmarkAsyncWriterPipe stands for a loaded gateway's access log: 64
// connections each send a request every 10 ms (some 6,400 lines a second),
// each request hashes 2 KiB (some work of its own) and queues one
// access-sized line, to a writer whose destination is a pipe drained by
// another goroutine, as stderr is in most deployments. It reports the
// Writes to the pipe (each one write(2)) per line and the process's CPU
// time (user + system) per line; ns/op is paced by the 10 ms and says
// nothing:
// go test -run '^$' -bench AsyncWriterPipe -benchtime 20000x ./telemetry
func BenchmarkAsyncWriterPipe(b *testing.B) {
	const conns, pace = 64, 10 * time.Millisecond
	r, pw, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	drained := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, r)
		close(drained)
	}()
	dst := &countingWriter{w: pw}
	w := NewAsyncWriter(dst, 0)
	line := []byte(strings.Repeat("x", 299) + "\n")
	cpu0 := cpuTime(b)
	b.ReportAllocs()
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			work := make([]byte, 2<<10)
			for next.Add(1) <= int64(b.N) {
				time.Sleep(pace) // the connection's next request
				sum := sha256.Sum256(work)
				work[0] = sum[0]
				w.TryWrite(line)
			}
		})
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	cpu := cpuTime(b) - cpu0
	pw.Close()
	<-drained
	r.Close()
	b.ReportMetric(float64(dst.writes.Load())/float64(b.N), "writes/line")
	b.ReportMetric(float64(w.Dropped())/float64(b.N), "drops/line")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/line")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestAsyncWriterQueuedLinesKeepOrder: once Write queues, every line is
// written in the order it was queued, operational and access lines
// alike: an operational line after the access lines queued before it (a
// request's line before the "stopped" that follows it), also when an
// operational line opens a flush and when Close flushes.
func TestAsyncWriterQueuedLinesKeepOrder(t *testing.T) {
	dst := chanWriter{writes: make(chan string, 100)}
	clock := newManualTimer()
	w := newAsyncWriter(dst, 16, time.Hour, clock.after)
	w.QueueWrites()
	// Each flush queues its lines in the order given, "a…" by TryWrite
	// (access), the others by Write (operational), and must write them in
	// that order. The first line starts the writer's wait; the flush comes
	// when the interval ends, or from Close.
	for _, f := range []struct {
		what, lines string
		close       bool
	}{
		{"a flush opened by an access line", "a1 op1 a2 a3 op2 op3 a4", false},
		{"a flush opened by an operational line", "op4 a5 op5 a6", false},
		{"Close", "a7 a8 stopped", true},
	} {
		queued := strings.Fields(f.lines)
		for i, s := range queued {
			if strings.HasPrefix(s, "a") {
				if !w.TryWrite([]byte(s + "\n")) {
					t.Fatalf("access line %s dropped", s)
				}
			} else if _, err := w.Write([]byte(s + "\n")); err != nil {
				t.Fatalf("operational line %s: %v", s, err)
			}
			if i == 0 {
				clock.waitStarted(t, time.Hour)
			}
		}
		if f.close {
			closeWithin(t, w)
		} else {
			clock.elapse(t)
		}
		var got string
		for strings.Count(got, "\n") < len(queued) {
			got += nextWrite(t, dst)
		}
		if got = strings.ReplaceAll(strings.TrimSuffix(got, "\n"), "\n", " "); got != f.lines {
			t.Errorf("%s wrote %q, want %q", f.what, got, f.lines)
		}
	}
}
