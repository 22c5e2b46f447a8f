package stack_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/memstore"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// TestStackSettles runs the settlement suite through a whole Stack
// (Fallback, DenialCache, memstore.Store): every layer passes Settle on.
func TestStackSettles(t *testing.T) {
	storetest.RunSettle(t, func(t *testing.T, now func() time.Time) ratelimit.Store {
		s := stack.New(nil, stack.Options{Now: now})
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// TestSettleRefundForgetsDenial: a denial the Stack remembers is forgotten
// when a settlement gives units back to its key, so the next request is
// decided on the refunded state rather than denied again locally.
func TestSettleRefundForgetsDenial(t *testing.T) {
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	s := stack.New(nil, stack.Options{Now: clock.Now})
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	it := ratelimit.Item{Key: "{t}:k", Algorithm: ratelimit.TokenBucket, Limit: ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 5}, Cost: 5}
	decide := func(cost int64) ratelimit.Decision {
		t.Helper()
		it.Cost = cost
		d, err := s.Decide(ctx, []ratelimit.Item{it})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if !decide(5).Allowed {
		t.Fatal("first reservation denied")
	}
	for range 2 {
		if decide(2).Allowed {
			t.Fatal("empty bucket allowed")
		}
	}
	if s.LocalDenials() != 1 {
		t.Fatalf("LocalDenials = %d, want 1: the second denial should come from the cache", s.LocalDenials())
	}
	applied, err := s.Settle(ctx, "req-1", []ratelimit.Settlement{{Item: it, Delta: -3}})
	if err != nil || !applied {
		t.Fatalf("Settle = %v, %v", applied, err)
	}
	if d := decide(2); !d.Allowed || d.Results[0].Remaining != 1 {
		t.Fatalf("after refunding 3: %+v, want allowed with 1 remaining", d)
	}
}

// TestSettleNeedsSettler: a Stack over a store that cannot settle says so.
func TestSettleNeedsSettler(t *testing.T) {
	s := stack.New(plainStore{memstore.New(memstore.Options{})}, stack.Options{})
	t.Cleanup(func() { s.Close() })
	it := ratelimit.Item{Key: "k", Algorithm: ratelimit.FixedWindow, Limit: ratelimit.Limit{Rate: 1, Per: time.Second}}
	if _, err := s.Settle(context.Background(), "id", []ratelimit.Settlement{{Item: it, Delta: 1}}); !errors.Is(err, ratelimit.ErrNoSettle) {
		t.Fatalf("err = %v, want ErrNoSettle", err)
	}
}

// plainStore hides every method of a store but those of Store.
type plainStore struct{ ratelimit.Store }
