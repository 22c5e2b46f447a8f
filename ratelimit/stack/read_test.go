package stack_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// readItem is a 0-cost item whose store error policy is closed: a Decide
// on a failing store answers it Unavailable, a Read returns the error.
var readItem = ratelimit.Item{Key: "{t}r", Algorithm: ratelimit.TokenBucket,
	Limit: ratelimit.Limit{Rate: 10, Per: time.Second, Burst: 10}, Shadow: true, OnError: ratelimit.OnErrorClosed}

// TestStackReadNeverMovesTheBreaker: failed reads, however many, leave the
// decisions' breaker closed and its failure count where it was; while it
// is open or half-open a read is refused without a store call and is not
// the probe; a decision's probe closes it and reads go through again.
func TestStackReadNeverMovesTheBreaker(t *testing.T) {
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	fs := &flakyStore{}
	b := stack.NewBreaker(fs, stack.BreakerOptions{Failures: 3, Cooldown: time.Second, Now: clock.Now})
	s := stack.New(b, stack.Options{Breaker: b, Now: clock.Now})
	ctx := context.Background()
	items := []ratelimit.Item{readItem}
	decide := func() ratelimit.Decision {
		t.Helper()
		d, err := s.Decide(ctx, []ratelimit.Item{{Key: "{t}d", Algorithm: ratelimit.TokenBucket,
			Limit: readItem.Limit, Cost: 1, OnError: ratelimit.OnErrorClosed}})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	fs.set(errDown)
	// Two failed decisions: one short of opening.
	for range 2 {
		if d := decide(); !d.Unavailable {
			t.Fatalf("decision on a failing store: %+v, want unavailable", d)
		}
	}
	for i := range 100 {
		d, err := s.Read(ctx, items)
		if !errors.Is(err, errDown) || errors.Is(err, ratelimit.ErrBreakerOpen) || d.Unavailable {
			t.Fatalf("read %d on a failing store: %+v, %v; want the store's error, no fallback", i, d, err)
		}
	}
	if st := b.State(); st != stack.BreakerClosed {
		t.Fatalf("after 2 failed decisions and 100 failed reads: breaker %v, want closed", st)
	}
	if fs.count() != 102 {
		t.Fatalf("store calls %d, want 102", fs.count())
	}
	// A successful read does not reset the decisions' count either: the
	// third failed decision opens the breaker.
	fs.set(nil)
	if _, err := s.Read(ctx, items); err != nil {
		t.Fatal(err)
	}
	fs.set(errDown)
	decide()
	if st := b.State(); st != stack.BreakerOpen {
		t.Fatalf("after the third failed decision: %v, want open", st)
	}

	calls := fs.count()
	for range 10 {
		if _, err := s.Read(ctx, items); !errors.Is(err, ratelimit.ErrBreakerOpen) || !errors.Is(err, ratelimit.ErrUnavailable) {
			t.Fatalf("read on an open breaker: %v", err)
		}
	}
	clock.Add(time.Second) // half-open: the next decision is the probe
	fs.set(nil)
	for range 10 {
		if _, err := s.Read(ctx, items); !errors.Is(err, ratelimit.ErrBreakerOpen) {
			t.Fatalf("read on a half-open breaker: %v, want refused (a read is never the probe)", err)
		}
	}
	if st := b.State(); st != stack.BreakerHalfOpen {
		t.Fatalf("after reads on a half-open breaker: %v, want still half-open", st)
	}
	if n := fs.count() - calls; n != 0 {
		t.Fatalf("%d reads reached the store while the breaker was open or half-open", n)
	}
	if d := decide(); d.Unavailable {
		t.Fatalf("probe: %+v", d)
	}
	if _, err := s.Read(ctx, items); err != nil || b.State() != stack.BreakerClosed {
		t.Fatalf("read after the probe closed the breaker: %v (breaker %v)", err, b.State())
	}
}

// TestStackReadChecksCost: a read of an item that costs anything is
// ErrInvalid before any store call.
func TestStackReadChecksCost(t *testing.T) {
	fs := &flakyStore{}
	s := stack.New(fs, stack.Options{})
	it := readItem
	it.Cost = 1
	if _, err := s.Read(context.Background(), []ratelimit.Item{readItem, it}); !errors.Is(err, ratelimit.ErrInvalid) {
		t.Fatalf("read of a costing item: %v, want ErrInvalid", err)
	}
	if fs.count() != 0 {
		t.Fatalf("%d store calls", fs.count())
	}
}

// TestStackReadMemory: without a breaker a read goes to the backend and
// reports what decisions left, consuming nothing.
func TestStackReadMemory(t *testing.T) {
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	s := stack.New(nil, stack.Options{Now: clock.Now})
	ctx := context.Background()
	spend := readItem
	spend.Shadow, spend.Cost = false, 4
	if d, err := s.Decide(ctx, []ratelimit.Item{spend}); err != nil || !d.Allowed {
		t.Fatalf("decide: %+v %v", d, err)
	}
	for range 3 {
		d, err := s.Read(ctx, []ratelimit.Item{readItem})
		if err != nil || len(d.Results) != 1 || d.Results[0].Remaining != 6 {
			t.Fatalf("read: %+v %v, want 6 remaining", d, err)
		}
	}
}
