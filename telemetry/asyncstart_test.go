package telemetry

import (
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
)

// gatedWriter stands for a pipe whose reader hung and then reads again:
// each Write reports itself on entered and returns only once open is
// closed; written keeps what it took, in order.
type gatedWriter struct {
	entered chan string
	open    chan struct{}
	mu      sync.Mutex
	written []string
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	g.entered <- string(p)
	<-g.open
	g.mu.Lock()
	g.written = append(g.written, string(p))
	g.mu.Unlock()
	return len(p), nil
}

// TestAsyncWriterStartWriteBounded: before QueueWrites, a Write to a
// destination that does not return gives up once its bound has passed (an
// injected timer, fired by the test) with ErrStartWriteTimeout; while that
// Write is stuck, later lines are dropped and counted at once, without a
// wait of their own; once the destination reads again, the stuck line is
// written and later lines go through synchronously again.
func TestAsyncWriterStartWriteBounded(t *testing.T) {
	dst := &gatedWriter{entered: make(chan string, 100), open: make(chan struct{})}
	bound := newManualTimer()
	w := newAsyncWriter(dst, 8, 0, nil)
	w.deadline = bound.after
	defer closeWithin(t, w)

	res := make(chan error, 1)
	go func() { _, err := w.Write([]byte("first\n")); res <- err }()
	if got := await(t, dst.entered, "the first line was not written"); got != "first\n" {
		t.Fatalf("writing %q, want the first line", got)
	}
	bound.waitStarted(t, StartWriteTimeout)
	select {
	case err := <-res:
		t.Fatalf("Write returned %v before its bound passed, with the destination stuck", err)
	default:
	}
	bound.elapse(t)
	if err := await(t, res, "Write did not return after its bound passed"); !errors.Is(err, ErrStartWriteTimeout) {
		t.Fatalf("Write returned %v, want ErrStartWriteTimeout", err)
	}
	if n, err := w.Write([]byte("second\n")); n != 0 || !errors.Is(err, ErrLineDropped) {
		t.Errorf("Write with the destination still stuck returned %d, %v; want 0, ErrLineDropped at once", n, err)
	}
	if d := w.Drops(); d.Operational != 1 || d.Access != 0 {
		t.Errorf("drops %+v, want 1 operational line", d)
	}
	select {
	case d := <-bound.waits:
		t.Errorf("a dropped line began a wait of %v", d)
	default:
	}

	close(dst.open) // the reader reads again
	deadlineAt := time.Now().Add(deadline)
	for {
		n, err := w.Write([]byte("third\n"))
		if err == nil && n == len("third\n") {
			break
		}
		if !errors.Is(err, ErrLineDropped) {
			t.Fatalf("Write once the destination reads: %d, %v", n, err)
		}
		if time.Now().After(deadlineAt) {
			proctest.FatalOverrun(t, "the stuck Write had not returned %v after the destination read again", deadline)
		}
		runtime.Gosched() // the stuck Write's goroutine is finishing
	}
	dst.mu.Lock()
	defer dst.mu.Unlock()
	if len(dst.written) != 2 || dst.written[0] != "first\n" || dst.written[1] != "third\n" {
		t.Errorf("destination took %q, want the first line, then the third", dst.written)
	}
}
