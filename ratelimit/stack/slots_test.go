package stack_test

import (
	"context"
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// TestStackSlotDenialsAreNeverRemembered: a slot frees whenever its request
// ends, so a Stack answers the next request from the store, not from the
// denial it just made; a batch that a rate item denied is remembered under
// the rate item's key only.
func TestStackSlotDenialsAreNeverRemembered(t *testing.T) {
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	s := stack.New(nil, stack.Options{Now: clock.Now})
	defer s.Close()
	ctx := context.Background()

	h1, h2 := storetest.SlotItem("{t}s", "h1", 1, ratelimit.OnErrorOpen), storetest.SlotItem("{t}s", "h2", 1, ratelimit.OnErrorOpen)
	if d, err := s.Decide(ctx, []ratelimit.Item{h1}); err != nil || !d.Allowed {
		t.Fatalf("h1: %+v, %v", d, err)
	}
	if d, err := s.Decide(ctx, []ratelimit.Item{h2}); err != nil || d.Allowed {
		t.Fatalf("h2 while h1 holds the slot: %+v, %v; want denied", d, err)
	}
	if err := s.Release(ctx, []ratelimit.Item{h1}); err != nil {
		t.Fatal(err)
	}
	if d, err := s.Decide(ctx, []ratelimit.Item{h2}); err != nil || !d.Allowed {
		t.Fatalf("h2 after h1's release: %+v, %v; want allowed at once", d, err)
	}
	if n := s.LocalDenials(); n != 0 {
		t.Errorf("%d denials answered locally, want 0", n)
	}

	rate := ratelimit.Item{Key: "{t}r", Algorithm: ratelimit.FixedWindow, Limit: ratelimit.Limit{Rate: 1, Per: time.Hour}, Cost: 1}
	if d, _ := s.Decide(ctx, []ratelimit.Item{rate}); !d.Allowed {
		t.Fatal("spending the rate item was denied")
	}
	h3 := storetest.SlotItem("{t}s", "h3", 1, ratelimit.OnErrorOpen)
	for i := range 2 {
		if d, _ := s.Decide(ctx, []ratelimit.Item{rate, h3}); d.Allowed {
			t.Fatalf("call %d: a spent rate item admitted", i)
		}
	}
	if n := s.LocalDenials(); n != 1 {
		t.Errorf("%d denials answered locally, want 1 (the rate item's)", n)
	}
}

// TestStackSlotsFallBackToLocalShare: with the backend down, a concurrency
// policy with on_store_error local holds this instance's share of max
// (max 5 over 2 instances: 3 slots), released in the local shares.
func TestStackSlotsFallBackToLocalShare(t *testing.T) {
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	inner := &flakyStore{}
	inner.set(errDown)
	s := stack.New(inner, stack.Options{Now: clock.Now, FleetSize: 2})
	defer s.Close()
	ctx := context.Background()
	var held []ratelimit.Item
	for i, want := range []bool{true, true, true, false} {
		it := storetest.SlotItem("{t}s", string(rune('a'+i)), 5, ratelimit.OnErrorLocal)
		d, err := s.Decide(ctx, []ratelimit.Item{it})
		if err != nil || d.Failure == nil || d.Allowed != want || d.Results[0].Fallback != ratelimit.OnErrorLocal {
			t.Fatalf("request %d: %+v, %v; want allowed=%v on the local share", i, d, err, want)
		}
		if d.Allowed {
			held = append(held, it)
		}
	}
	if err := s.Release(ctx, held[:1]); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if d, _ := s.Decide(ctx, []ratelimit.Item{storetest.SlotItem("{t}s", "z", 5, ratelimit.OnErrorLocal)}); !d.Allowed {
		t.Errorf("after a local release: %+v, want a slot", d)
	}
}

func TestLocalShareOfSlots(t *testing.T) {
	for _, c := range []struct{ max, fleet, want int64 }{{5, 2, 3}, {2, 4, 1}, {20, 1, 20}, {1, 3, 1}} {
		got := stack.LocalShare(ratelimit.Limit{Max: c.max, Per: time.Second}, ratelimit.Concurrency, c.fleet, 1)
		if got.Max != c.want || got.Per != time.Second || got.Rate != 0 {
			t.Errorf("share of max %d over %d: %+v, want max %d", c.max, c.fleet, got, c.want)
		}
	}
}
