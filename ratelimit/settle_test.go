package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// TestStackSettles runs the settlement suite through a whole Stack
// (Fallback, DenialCache, MemoryStore): every layer passes Settle on.
func TestStackSettles(t *testing.T) {
	storetest.RunSettle(t, func(t *testing.T, now func() time.Time) ratelimit.Store {
		s := ratelimit.NewStack(nil, ratelimit.StackOptions{Now: now})
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// TestSettleRefundForgetsDenial: a denial the Stack remembers is forgotten
// when a settlement gives units back to its key, so the next request is
// decided on the refunded state rather than denied again locally.
func TestSettleRefundForgetsDenial(t *testing.T) {
	clock := storetest.NewClock(t0)
	s := ratelimit.NewStack(nil, ratelimit.StackOptions{Now: clock.Now})
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
	s := ratelimit.NewStack(plainStore{ratelimit.NewMemoryStore(ratelimit.MemoryOptions{})}, ratelimit.StackOptions{})
	t.Cleanup(func() { s.Close() })
	it := ratelimit.Item{Key: "k", Algorithm: ratelimit.FixedWindow, Limit: ratelimit.Limit{Rate: 1, Per: time.Second}}
	if _, err := s.Settle(context.Background(), "id", []ratelimit.Settlement{{Item: it, Delta: 1}}); !errors.Is(err, ratelimit.ErrNoSettle) {
		t.Fatalf("err = %v, want ErrNoSettle", err)
	}
}

// plainStore hides every method of a store but those of Store.
type plainStore struct{ ratelimit.Store }

// TestMemorySettleIdForgottenAfterWindow: an id is remembered for
// SettleWindow on the store's clock, then applies again.
func TestMemorySettleIdForgottenAfterWindow(t *testing.T) {
	clock := storetest.NewClock(t0)
	s := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{Now: clock.Now})
	it := ratelimit.Item{Key: "k", Algorithm: ratelimit.FixedWindow, Limit: ratelimit.Limit{Rate: 100, Per: time.Hour}}
	ss := []ratelimit.Settlement{{Item: it, Delta: 1}}
	for i, c := range []struct {
		after time.Duration
		want  bool
	}{{0, true}, {0, false}, {ratelimit.SettleWindow - time.Microsecond, false}, {ratelimit.SettleWindow, true}} {
		clock.Set(t0.Add(c.after))
		if got, err := s.Settle(context.Background(), "id", ss); err != nil || got != c.want {
			t.Errorf("call %d at +%v: applied = %v, %v; want %v", i, c.after, got, err, c.want)
		}
	}
}

// TestSettleArithmetic pins what Settle does to one state per algorithm.
func TestSettleArithmetic(t *testing.T) {
	now := t0.UnixMicro()
	tb := ratelimit.Limit{Rate: 10, Per: time.Second, Burst: 10}
	// A charge below the floor of exactness stops there.
	st, _, _ := ratelimit.Settle(ratelimit.TokenBucket, nil, now, 0, ratelimit.MaxSettleDelta(ratelimit.TokenBucket, tb), tb)
	st, ttl, _ := ratelimit.Settle(ratelimit.TokenBucket, &st, now, 0, ratelimit.MaxSettleDelta(ratelimit.TokenBucket, tb), tb)
	if want := 10*1_000_000 - int64(1)<<53; st.Level != want {
		t.Errorf("deepest debt: level %d, want %d", st.Level, want)
	}
	if ttl <= 0 {
		t.Errorf("a bucket in debt must be kept: ttl %v", ttl)
	}
	st, _, _ = ratelimit.Settle(ratelimit.TokenBucket, &st, now, 0, -ratelimit.MaxSettleDelta(ratelimit.TokenBucket, tb), tb)
	if st.Per == 0 || st.Level >= 10*1_000_000 {
		t.Errorf("one refund of the deepest debt: %+v, want still short of full", st)
	}
	st, ttl, _ = ratelimit.Settle(ratelimit.TokenBucket, &st, now, 0, -ratelimit.MaxSettleDelta(ratelimit.TokenBucket, tb), tb)
	if st.Per != 0 || ttl != 0 {
		t.Errorf("refund to full: %+v, ttl %v; want an absent key", st, ttl)
	}
	// An invalid settlement leaves the state as it is.
	in := ratelimit.State{Per: 1_000_000, Level: 5}
	if got, ttl, changed := ratelimit.Settle(ratelimit.TokenBucket, &in, now, 0, 1<<62, tb); got.Level != 5 || ttl != 0 || changed {
		t.Errorf("invalid delta: %+v, %v", got, ttl)
	}
	// A sliding log refund takes off the newest entries first.
	sl := ratelimit.Limit{Rate: 10, Per: time.Second}
	log := ratelimit.State{Per: 1_000_000, Entries: []ratelimit.LogEntry{{At: now - 2, Cost: 3}, {At: now - 1, Cost: 2}}}
	got, _, _ := ratelimit.Settle(ratelimit.SlidingLog, &log, now, 0, -3, sl)
	if len(got.Entries) != 1 || got.Entries[0] != (ratelimit.LogEntry{At: now - 2, Cost: 2}) {
		t.Errorf("sliding log refund of 3: %+v", got.Entries)
	}
	if len(log.Entries) != 2 || log.Entries[1].Cost != 2 {
		t.Errorf("Settle modified its input: %+v", log.Entries)
	}
	// With the reservation's time, only its entries give units back.
	got, _, changed := ratelimit.Settle(ratelimit.SlidingLog, &log, now, now-2, -4, sl)
	if !changed || len(got.Entries) != 1 || got.Entries[0] != (ratelimit.LogEntry{At: now - 1, Cost: 2}) {
		t.Errorf("sliding log refund of 4 reserved at now-2: %+v (changed %v), want only the entry at now-1 left", got.Entries, changed)
	}
	if got, _, changed := ratelimit.Settle(ratelimit.SlidingLog, &log, now, now-5, -1, sl); changed || len(got.Entries) != 2 {
		t.Errorf("refund of a reservation with no entry left: %+v (changed %v), want nothing changed", got.Entries, changed)
	}
	// A reservation time after now (the clock went back) is now.
	if got, _, changed := ratelimit.Settle(ratelimit.SlidingLog, &log, now-1, now+7, -1, sl); !changed || got.Entries[1].Cost != 1 {
		t.Errorf("refund reserved after now: %+v (changed %v), want 1 off the entry at now-1", got.Entries, changed)
	}
}
