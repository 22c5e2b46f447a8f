package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

// slotLimit is the suite's concurrency limit: 2 slots, each held 10 s
// without a renewal.
var slotLimit = ratelimit.Limit{Max: 2, Per: 10 * time.Second}

// slot returns a concurrency item of key name for holder (cost 1), or a
// peek at the key (cost 0) when holder is "".
func (e *env) slot(name, holder string) ratelimit.Item {
	it := ratelimit.Item{Key: e.key(name), Algorithm: ratelimit.Concurrency, Limit: slotLimit, Holder: holder}
	if holder != "" {
		it.Cost = 1
	}
	return it
}

// slots returns the store as a SlotStore, failing the test if it is not.
func (e *env) slots() ratelimit.SlotStore {
	e.t.Helper()
	s, ok := e.store.(ratelimit.SlotStore)
	if !ok {
		e.t.Fatalf("%T is not a ratelimit.SlotStore", e.store)
	}
	return s
}

func (e *env) release(items ...ratelimit.Item) {
	e.t.Helper()
	if err := e.slots().Release(context.Background(), items); err != nil {
		e.t.Fatalf("Release: %v", err)
	}
}

// renew renews items and checks the indexes of those it reports lost.
func (e *env) renew(lost []int, items ...ratelimit.Item) {
	e.t.Helper()
	got, err := e.slots().Renew(context.Background(), items)
	if err != nil {
		e.t.Fatalf("Renew: %v", err)
	}
	if !slices.Equal(got, lost) {
		e.t.Errorf("Renew reported lost %v, want %v", got, lost)
	}
}

// renewReport renews items and checks the indexes of those it reports
// lost and taken back, when the store reports them (see
// ratelimit.RenewReporter); otherwise as renew.
func (e *env) renewReport(lost, retaken []int, items ...ratelimit.Item) {
	e.t.Helper()
	rr, ok := e.store.(ratelimit.RenewReporter)
	if !ok {
		e.renew(lost, items...)
		return
	}
	r, err := rr.RenewReport(context.Background(), items)
	if err != nil {
		e.t.Fatalf("RenewReport: %v", err)
	}
	if !slices.Equal(r.Lost, lost) || !slices.Equal(r.Retaken, retaken) {
		e.t.Errorf("RenewReport reported lost %v, taken back %v; want %v, %v", r.Lost, r.Retaken, lost, retaken)
	}
}

// wantSlot decides it alone and compares the whole Result.
func (e *env) wantSlot(what string, it ratelimit.Item, want ratelimit.Result) {
	e.t.Helper()
	want.Limit = slotLimit.Max
	want = e.stamped(want)
	if r := e.one(it); r != want {
		e.t.Errorf("%s:\n got %+v\nwant %+v", what, r, want)
	}
}

const sec = time.Second

// testSlots is the conformance of Concurrency items and SlotStore.
func testSlots(t *testing.T, newStore NewStore) {
	t.Run("acquire_up_to_max", func(t *testing.T) {
		e := newEnv(t, newStore)
		e.set(0)
		e.wantSlot("first", e.slot("s", "h1"), ratelimit.Result{Allowed: true, Remaining: 1, ResetAfter: 10 * sec})
		e.set(20)
		e.wantSlot("second", e.slot("s", "h2"), ratelimit.Result{Allowed: true, Remaining: 0, ResetAfter: 10 * sec})
		// Denied until the earliest slot (h1's, at t0+10s) expires.
		e.wantSlot("third", e.slot("s", "h3"), ratelimit.Result{Remaining: 0, RetryAfter: 8 * sec, ResetAfter: 10 * sec})
		e.wantSlot("peek", e.slot("s", ""), ratelimit.Result{Allowed: true, Remaining: 0, ResetAfter: 10 * sec})
		e.set(50)
		e.wantSlot("third later", e.slot("s", "h3"), ratelimit.Result{Remaining: 0, RetryAfter: 5 * sec, ResetAfter: 7 * sec})
	})
	t.Run("release_frees", func(t *testing.T) {
		e := newEnv(t, newStore)
		e.set(0)
		e.wantAllowed("h1", e.one(e.slot("s", "h1")), true)
		e.wantAllowed("h2", e.one(e.slot("s", "h2")), true)
		e.wantAllowed("h3 while full", e.one(e.slot("s", "h3")), false)
		e.release(e.slot("s", "h1"))
		e.release(e.slot("s", "h1"))      // twice: nothing more to free
		e.release(e.slot("s", "unknown")) // never held
		e.release(e.slot("other", "h9"))  // a key that does not exist
		e.wantSlot("after release", e.slot("s", ""), ratelimit.Result{Allowed: true, Remaining: 1, ResetAfter: 10 * sec})
		e.wantAllowed("h3 after release", e.one(e.slot("s", "h3")), true)
		e.wantAllowed("h4 full again", e.one(e.slot("s", "h4")), false)
		e.release(e.slot("s", "h2"), e.slot("s", "h3"))
		e.wantSlot("all released", e.slot("s", ""), ratelimit.Result{Allowed: true, Remaining: 2})
	})
	t.Run("expiry_frees", func(t *testing.T) {
		e := newEnv(t, newStore)
		e.set(0)
		e.wantAllowed("h1", e.one(e.slot("s", "h1")), true)
		e.set(50)
		e.wantAllowed("h2", e.one(e.slot("s", "h2")), true)
		e.set(99)
		e.wantAllowed("h3 just before h1 expires", e.one(e.slot("s", "h3")), false)
		e.set(100) // h1 expires exactly now
		e.wantSlot("h3 as h1 expires", e.slot("s", "h3"), ratelimit.Result{Allowed: true, Remaining: 0, ResetAfter: 10 * sec})
		e.wantSlot("h4", e.slot("s", "h4"), ratelimit.Result{Remaining: 0, RetryAfter: 5 * sec, ResetAfter: 10 * sec})
		e.set(300)
		e.wantSlot("all expired", e.slot("s", ""), ratelimit.Result{Allowed: true, Remaining: 2})
	})
	t.Run("renew_keeps", func(t *testing.T) {
		e := newEnv(t, newStore)
		e.set(0)
		e.wantAllowed("h1", e.one(e.slot("s", "h1")), true)
		e.wantAllowed("h2", e.one(e.slot("s", "h2")), true)
		e.set(90)
		e.renew(nil, e.slot("s", "h1")) // h1 now expires at t0+19s
		e.set(100)
		e.wantSlot("h2 expired, h1 renewed", e.slot("s", "h3"), ratelimit.Result{Allowed: true, Remaining: 0, ResetAfter: 10 * sec})
		e.wantSlot("full", e.slot("s", "h4"), ratelimit.Result{Remaining: 0, RetryAfter: 9 * sec, ResetAfter: 10 * sec})
		// An expired slot is not taken back while the key is full: a late
		// renewal reports it lost, and only it.
		e.renew([]int{0, 2}, e.slot("s", "h2"), e.slot("s", "h3"), e.slot("s", "gone"))
		e.release(e.slot("s", "h3"))
		e.wantSlot("h2 stays expired", e.slot("s", ""), ratelimit.Result{Allowed: true, Remaining: 1, ResetAfter: 9 * sec})
		e.set(190)
		e.wantSlot("h1 expires at last", e.slot("s", ""), ratelimit.Result{Allowed: true, Remaining: 2})
		// With room, a late renewal takes its slot back.
		e.renew(nil, e.slot("s", "h1"))
		e.wantSlot("h1 taken back", e.slot("s", ""), ratelimit.Result{Allowed: true, Remaining: 1, ResetAfter: 10 * sec})
	})
	t.Run("renew_takes_back_with_room", func(t *testing.T) {
		e := newEnv(t, newStore)
		e.set(0)
		e.wantAllowed("h1", e.one(e.slot("s", "h1")), true)
		e.wantAllowed("h2", e.one(e.slot("s", "h2")), true)
		// Both members go under their holders (as a failover or an
		// eviction would drop them), the key with the last one.
		e.release(e.slot("s", "h1"), e.slot("s", "h2"))
		e.set(30)
		e.renewReport(nil, []int{0}, e.slot("s", "h1"))
		e.wantSlot("h1's slot counted again", e.slot("s", ""), ratelimit.Result{Allowed: true, Remaining: 1, ResetAfter: 10 * sec})
		e.wantAllowed("h3 on the one slot left", e.one(e.slot("s", "h3")), true)
		e.wantSlot("h4 while full", e.slot("s", "h4"), ratelimit.Result{Remaining: 0, RetryAfter: 10 * sec, ResetAfter: 10 * sec})
		// h2's slot is lost: h1 and h3 fill the key.
		e.renewReport([]int{1}, nil, e.slot("s", "h1"), e.slot("s", "h2"))
		e.release(e.slot("s", "h3"))
		// An expired member, with room, is taken back too, to a full
		// Per from the renewal.
		e.set(200)
		e.renewReport(nil, []int{0}, e.slot("s", "h1"))
		e.wantSlot("h1 taken back after expiring", e.slot("s", ""), ratelimit.Result{Allowed: true, Remaining: 1, ResetAfter: 10 * sec})
	})
	t.Run("renew_lost_when_full", func(t *testing.T) {
		e := newEnv(t, newStore)
		e.set(0)
		e.wantAllowed("h1", e.one(e.slot("s", "h1")), true)
		e.release(e.slot("s", "h1")) // h1's member goes under it
		e.wantAllowed("h2", e.one(e.slot("s", "h2")), true)
		e.wantAllowed("h3", e.one(e.slot("s", "h3")), true)
		e.set(30)
		e.renew([]int{0}, e.slot("s", "h1"), e.slot("s", "h2"))
		e.wantSlot("h1 not counted", e.slot("s", "h4"), ratelimit.Result{Remaining: 0, RetryAfter: 7 * sec, ResetAfter: 10 * sec})
		e.release(e.slot("s", "h3"))
		e.wantSlot("h4 on h3's slot", e.slot("s", "h4"), ratelimit.Result{Allowed: true, Remaining: 0, ResetAfter: 10 * sec})
	})
	t.Run("all_or_nothing", func(t *testing.T) {
		e := newEnv(t, newStore)
		rate := spec{ratelimit.FixedWindow, ratelimit.Limit{Rate: 1, Per: time.Hour}}
		e.set(0)
		e.wantAllowed("h1", e.one(e.slot("s", "h1")), true)
		e.wantAllowed("h2", e.one(e.slot("s", "h2")), true)
		// Slots full: the rate item is not consumed.
		d := e.decide(e.item("rate", rate, 1), e.slot("s", "h3"))
		if d.Allowed || !d.Results[0].Allowed || d.Results[1].Allowed {
			e.t.Errorf("rate with room, slots full: %+v", d)
		}
		e.wantRemaining("rate item of a batch the slots denied", "rate", rate, 1)
		// A slot free, the rate spent: no slot is taken.
		e.release(e.slot("s", "h1"), e.slot("s", "h2"))
		e.wantAllowed("spend the rate", e.one(e.item("rate", rate, 1)), true)
		d = e.decide(e.item("rate", rate, 1), e.slot("s", "h3"))
		if d.Allowed || d.Results[0].Allowed || !d.Results[1].Allowed {
			e.t.Errorf("rate spent, slots free: %+v", d)
		}
		e.wantSlot("slot of a batch the rate denied", e.slot("s", ""), ratelimit.Result{Allowed: true, Remaining: 2})
		// Both fit: both are taken.
		d = e.decide(e.item("rate2", rate, 1), e.slot("s", "h3"))
		if !d.Allowed {
			e.t.Errorf("both fit: %+v", d)
		}
		e.wantRemaining("rate item admitted with a slot", "rate2", rate, 0)
		e.wantSlot("slot admitted with a rate item", e.slot("s", ""), ratelimit.Result{Allowed: true, Remaining: 1, ResetAfter: 10 * sec})
	})
	t.Run("invalid", func(t *testing.T) {
		e := newEnv(t, newStore)
		bad := []struct {
			name string
			it   ratelimit.Item
		}{
			{"cost 2", ratelimit.Item{Key: e.key("s"), Algorithm: ratelimit.Concurrency, Limit: slotLimit, Cost: 2, Holder: "h"}},
			{"no holder", ratelimit.Item{Key: e.key("s"), Algorithm: ratelimit.Concurrency, Limit: slotLimit, Cost: 1}},
			{"zero max", ratelimit.Item{Key: e.key("s"), Algorithm: ratelimit.Concurrency, Limit: ratelimit.Limit{Per: sec}, Cost: 1, Holder: "h"}},
			{"no ttl", ratelimit.Item{Key: e.key("s"), Algorithm: ratelimit.Concurrency, Limit: ratelimit.Limit{Max: 2}, Cost: 1, Holder: "h"}},
			{"rate set", ratelimit.Item{Key: e.key("s"), Algorithm: ratelimit.Concurrency, Limit: ratelimit.Limit{Max: 2, Per: sec, Rate: 1}, Cost: 1, Holder: "h"}},
			{"max on a window", ratelimit.Item{Key: e.key("s"), Algorithm: ratelimit.FixedWindow, Limit: ratelimit.Limit{Rate: 2, Per: sec, Max: 2}, Cost: 1}},
		}
		for _, c := range bad {
			if _, err := e.store.Decide(context.Background(), []ratelimit.Item{c.it}); !errors.Is(err, ratelimit.ErrInvalid) {
				e.t.Errorf("Decide %s: err = %v, want one wrapping ErrInvalid", c.name, err)
			}
		}
		window := ratelimit.Item{Key: e.key("w"), Algorithm: ratelimit.FixedWindow, Limit: ratelimit.Limit{Rate: 2, Per: sec}, Cost: 1}
		for _, items := range [][]ratelimit.Item{{window}, {e.slot("s", "")}, {bad[3].it}} {
			if err := e.slots().Release(context.Background(), items); !errors.Is(err, ratelimit.ErrInvalid) {
				e.t.Errorf("Release %+v: err = %v, want one wrapping ErrInvalid", items, err)
			}
			if _, err := e.slots().Renew(context.Background(), items); !errors.Is(err, ratelimit.ErrInvalid) {
				e.t.Errorf("Renew %+v: err = %v, want one wrapping ErrInvalid", items, err)
			}
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		e := newEnv(t, newStore)
		e.set(0)
		lim := ratelimit.Limit{Max: 10, Per: time.Minute}
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for g := range 40 {
			wg.Go(func() {
				it := ratelimit.Item{Key: e.key("c"), Algorithm: ratelimit.Concurrency, Limit: lim, Cost: 1, Holder: fmt.Sprintf("h%d", g)}
				d, err := e.store.Decide(context.Background(), []ratelimit.Item{it})
				if err != nil {
					e.t.Errorf("Decide: %v", err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			})
		}
		wg.Wait()
		if n := admitted.Load(); n != lim.Max {
			e.t.Errorf("%d of 40 concurrent requests took a slot, want exactly %d", n, lim.Max)
		}
	})
}

// SlotItem is a Concurrency item of key for holder: at most max slots,
// each held for 30s unless renewed, cost 1, with OnError mode.
func SlotItem(key, holder string, max int64, mode ratelimit.OnError) ratelimit.Item {
	return ratelimit.Item{Key: key, Algorithm: ratelimit.Concurrency, Limit: ratelimit.Limit{Max: max, Per: 30 * time.Second},
		Cost: 1, Holder: holder, OnError: mode}
}
