package stack_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// flakyStore fails while err is set and counts the calls that reach it.
type flakyStore struct {
	mu    sync.Mutex
	err   error
	calls int
}

func (f *flakyStore) set(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

func (f *flakyStore) Decide(context.Context, []ratelimit.Item) (ratelimit.Decision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return ratelimit.Decision{}, f.err
	}
	return ratelimit.Decision{Allowed: true}, nil
}

func (f *flakyStore) Close() error { return nil }

func (f *flakyStore) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

var errDown = fmt.Errorf("%w: connection refused", ratelimit.ErrUnavailable)

func TestBreakerStates(t *testing.T) {
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	fs := &flakyStore{}
	b := stack.NewBreaker(fs, stack.BreakerOptions{Failures: 3, Cooldown: time.Second, Now: clock.Now})
	ctx := context.Background()
	decide := func() error {
		_, err := b.Decide(ctx, nil)
		return err
	}
	want := func(st stack.BreakerState, calls int) {
		t.Helper()
		if got := b.State(); got != st {
			t.Fatalf("state %v, want %v", got, st)
		}
		if got := fs.count(); got != calls {
			t.Fatalf("store called %d times, want %d", got, calls)
		}
	}

	// Failures below the threshold, interrupted by a success, keep it closed.
	fs.set(errDown)
	decide()
	decide()
	fs.set(nil)
	if err := decide(); err != nil {
		t.Fatalf("healthy store: %v", err)
	}
	fs.set(errDown)
	decide()
	decide()
	want(stack.BreakerClosed, 5)
	// Invalid items and a caller's cancellation say nothing about the store.
	fs.set(fmt.Errorf("%w: bad", ratelimit.ErrInvalid))
	decide()
	fs.set(fmt.Errorf("%w: %w", ratelimit.ErrUnavailable, context.Canceled))
	decide()
	want(stack.BreakerClosed, 7)

	// The third consecutive failure opens it.
	fs.set(errDown)
	if err := decide(); !errors.Is(err, errDown) {
		t.Fatalf("third failure: %v", err)
	}
	want(stack.BreakerOpen, 8)
	for range 10 {
		err := decide()
		if !errors.Is(err, ratelimit.ErrBreakerOpen) || !errors.Is(err, ratelimit.ErrUnavailable) {
			t.Fatalf("open breaker: err = %v, want ratelimit.ErrBreakerOpen and ErrUnavailable", err)
		}
	}
	want(stack.BreakerOpen, 8)

	// Just before the cooldown: still open. At it: half-open, one probe.
	clock.Add(time.Second - time.Nanosecond)
	decide()
	want(stack.BreakerOpen, 8)
	clock.Add(time.Nanosecond)
	want(stack.BreakerHalfOpen, 8)
	decide() // the probe fails
	want(stack.BreakerOpen, 9)
	decide()
	want(stack.BreakerOpen, 9)

	// The next probe succeeds and closes it.
	clock.Add(time.Second)
	fs.set(nil)
	if err := decide(); err != nil {
		t.Fatalf("successful probe: %v", err)
	}
	want(stack.BreakerClosed, 10)
	for range 3 {
		decide()
	}
	want(stack.BreakerClosed, 13)
}

// blockingStore blocks in Decide until release is closed.
type blockingStore struct {
	entered chan struct{}
	release chan struct{}
}

func (s *blockingStore) Decide(context.Context, []ratelimit.Item) (ratelimit.Decision, error) {
	s.entered <- struct{}{}
	<-s.release
	return ratelimit.Decision{Allowed: true}, nil
}

func (s *blockingStore) Close() error { return nil }

func TestBreakerOneProbeAtATime(t *testing.T) {
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	bs := &blockingStore{entered: make(chan struct{}), release: make(chan struct{})}
	b := stack.NewBreaker(&switchStore{first: errDown, then: bs}, stack.BreakerOptions{Failures: 1, Now: clock.Now})
	b.Decide(context.Background(), nil)
	if b.State() != stack.BreakerOpen {
		t.Fatalf("state %v after a failure with Failures 1", b.State())
	}
	clock.Add(time.Second) // the default cooldown

	done := make(chan error)
	go func() {
		_, err := b.Decide(context.Background(), nil)
		done <- err
	}()
	<-bs.entered // the probe is in the store
	if _, err := b.Decide(context.Background(), nil); !errors.Is(err, ratelimit.ErrBreakerOpen) {
		t.Fatalf("call during the probe: err = %v, want ratelimit.ErrBreakerOpen", err)
	}
	close(bs.release)
	if err := <-done; err != nil {
		t.Fatalf("probe: %v", err)
	}
	if b.State() != stack.BreakerClosed {
		t.Fatalf("state %v after a successful probe", b.State())
	}
}

// switchStore fails its first call with first, then delegates to then.
type switchStore struct {
	mu    sync.Mutex
	first error
	then  ratelimit.Store
}

func (s *switchStore) Decide(ctx context.Context, items []ratelimit.Item) (ratelimit.Decision, error) {
	s.mu.Lock()
	err := s.first
	s.first = nil
	s.mu.Unlock()
	if err != nil {
		return ratelimit.Decision{}, err
	}
	return s.then.Decide(ctx, items)
}

func (s *switchStore) Close() error { return nil }

func TestBreakerStateString(t *testing.T) {
	for st, want := range map[stack.BreakerState]string{
		stack.BreakerClosed: "closed", stack.BreakerOpen: "open", stack.BreakerHalfOpen: "half-open", 9: "BreakerState(9)",
	} {
		if got := st.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", st, got, want)
		}
	}
}
