package stack

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/memstore"
)

// FallbackOptions configure a Fallback. Zero values take the defaults.
type FallbackOptions struct {
	// RetryAfter is what a decision refused by OnErrorClosed advertises:
	// about the time until the store below is tried again (for a Breaker,
	// its cooldown). Default 1s.
	RetryAfter time.Duration
	// Now is the clock of the local shares (OnErrorLocal); nil = time.Now.
	Now func() time.Time
	// FleetSize is the number of instances sharing the store below: an
	// OnErrorLocal item is decided on LocalShare of its limit for this
	// many instances. 0 or less means 1. Fleet, when set, replaces it.
	FleetSize int
	// Fleet, when set, returns the number of instances at each fallback
	// decision (see Fleet.Size), so that the shares follow the live fleet;
	// a value below 1 counts as 1.
	Fleet func() int64
}

// Fallback is the top layer of a store stack: it passes every batch to the
// store below it and, when that store cannot decide (any error), decides
// the batch by each item's OnError instead, reporting the store's error in
// Decision.Failure rather than failing:
//
//   - If a non-shadow item has OnErrorClosed, the batch is refused as
//     Unavailable, with RetryAfter from FallbackOptions; nothing else is
//     decided.
//   - Otherwise the items with OnErrorLocal are decided together, each on
//     LocalShare of its limit, by a memstore.Store of this process (its state
//     is this instance's alone and starts full); items with OnErrorOpen are
//     allowed. An item whose local decision fails (an invalid item) is
//     allowed as open.
//
// Each Result's Fallback names the mode that decided it. A batch with an
// item whose OnError is not valid gets the store's error back unchanged.
// A Fallback is safe for concurrent use.
type Fallback struct {
	inner ratelimit.Store
	local *memstore.Store
	retry time.Duration
	fleet func() int64
	now   func() time.Time // the local shares' clock
	// slotsUntil is 0 while the local shares hold no slot; otherwise a
	// time on their clock, in µs since the epoch, from which on none of
	// the slots taken or renewed there is still held: at least the expiry
	// of each. It is raised after each call that takes or renews a slot
	// there (before that call returns), and back to 0 by localHolds once
	// it has passed. See localHolds.
	slotsUntil atomic.Int64
}

// NewFallback puts a Fallback on inner, which it owns: Close closes it.
func NewFallback(inner ratelimit.Store, o FallbackOptions) *Fallback {
	if o.RetryAfter <= 0 {
		o.RetryAfter = time.Second
	}
	fleet := o.Fleet
	if fleet == nil {
		n := int64(max(o.FleetSize, 1))
		fleet = func() int64 { return n }
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	return &Fallback{inner: inner, local: memstore.New(memstore.Options{Now: now}), retry: o.RetryAfter, fleet: fleet, now: now}
}

// Decide decides items on the store below, or by their OnError when it
// fails (see Fallback). It returns an error only when the store failed and
// an item has no valid OnError.
func (f *Fallback) Decide(ctx context.Context, items []ratelimit.Item) (ratelimit.Decision, error) {
	d, err := f.inner.Decide(ctx, items)
	if err == nil {
		return d, nil
	}
	for i := range items {
		if !items[i].OnError.Valid() {
			return d, err
		}
	}
	return f.fallback(ctx, items, err), nil
}

// fallback decides items by their OnError after the store failed with err.
func (f *Fallback) fallback(ctx context.Context, items []ratelimit.Item, err error) ratelimit.Decision {
	d := ratelimit.Decision{Allowed: true, Results: make([]ratelimit.Result, len(items)), Failure: err}
	var local []ratelimit.Item
	var at []int              // local[k] is items[at[k]]
	var slotPer time.Duration // the longest Per of a local Concurrency item
	fleet := max(f.fleet(), 1)
	for i := range items {
		it := &items[i]
		d.Results[i] = ratelimit.Result{Allowed: true, Fallback: it.OnError}
		switch {
		case it.OnError == ratelimit.OnErrorClosed && !it.Shadow:
			d.Allowed, d.Unavailable, d.RetryAfter = false, true, f.retry
		case it.OnError == ratelimit.OnErrorLocal:
			if it.Algorithm == ratelimit.Concurrency {
				slotPer = max(slotPer, it.Limit.Per)
			}
			share := LocalShare(it.Limit, it.Algorithm, fleet, it.Cost)
			local = append(local, ratelimit.Item{Key: it.Key, Algorithm: it.Algorithm, Limit: share, Cost: it.Cost, Shadow: it.Shadow, Holder: it.Holder})
			at = append(at, i)
		}
	}
	if d.Unavailable || len(local) == 0 {
		return d
	}
	ld, lerr := f.local.Decide(ctx, local)
	if slotPer > 0 {
		// Read after the Decide: its slots expire at most slotPer from now.
		f.slotsHeldUntil(f.now().UnixMicro() + slotPer.Microseconds())
	}
	if lerr != nil {
		for _, i := range at {
			d.Results[i].Fallback = ratelimit.OnErrorOpen
		}
		return d
	}
	for k, i := range at {
		r := ld.Results[k]
		r.Fallback = ratelimit.OnErrorLocal
		d.Results[i] = r
		d.Fold(r, items[i].Shadow)
	}
	return d
}

// localHolds reports whether the local shares may hold a slot: one was
// taken there and the latest expiry given to one (slotsUntil) is still
// ahead on their clock. Once it has passed, no slot is held there (a
// release only frees one sooner, and a renewal extends it only while held)
// and it forgets it, so that the next calls read no clock until a slot is
// taken there again. It costs an atomic load, and a clock read while
// slots may be held.
//
// A renewal or release of a slot that runs at the same time as a renewal
// of that slot in the local shares may find slotsUntil passed just before
// that renewal raises it: the release is then skipped, and the slot frees
// itself after its Limit.Per, as after a failed release. A clock that
// steps back makes slots live longer by the step than slotsUntil says, with
// the same outcome.
func (f *Fallback) localHolds() bool {
	until := f.slotsUntil.Load()
	if until == 0 {
		return false
	}
	if f.now().UnixMicro() < until {
		return true
	}
	// A slot taken or renewed meanwhile has raised it: keep that.
	f.slotsUntil.CompareAndSwap(until, 0)
	return false
}

// slotsHeldUntil raises slotsUntil to until (µs on the local shares'
// clock) when it is below; to 1 at least, since 0 means no slot (a clock
// before 1970 thus keeps the local shares consulted until it passes 1970).
func (f *Fallback) slotsHeldUntil(until int64) {
	until = max(until, 1)
	for {
		old := f.slotsUntil.Load()
		if old >= until || f.slotsUntil.CompareAndSwap(old, until) {
			return
		}
	}
}

// renewLocal renews the slots of items that the local shares hold (see
// memstore.Store.RenewHeld; it never takes a slot back, so Lost lists every item
// they do not hold), and raises slotsUntil to cover the slots it renewed.
func (f *Fallback) renewLocal(ctx context.Context, items []ratelimit.Item) (ratelimit.Renewal, error) {
	r, err := f.local.RenewHeld(ctx, items)
	if err != nil {
		return r, err
	}
	var per time.Duration
	lost := r.Lost
	for i := range items {
		if len(lost) > 0 && lost[0] == i {
			lost = lost[1:]
			continue
		}
		per = max(per, items[i].Limit.Per)
	}
	if per > 0 {
		// Read after the renewal: it extended each slot to at most per
		// from now.
		f.slotsHeldUntil(f.now().UnixMicro() + per.Microseconds())
	}
	return r, nil
}

// LocalShare is one instance's part of limit l of algorithm alg shared by
// fleet instances: the rate, burst and max divided by fleet, rounded up so
// that a share is never zero, and a capacity never below cost (a request the
// full limit could admit stays admissible). Rounding up means a fleet that
// falls back all at once admits at most fleet-1 units more than the limit per
// period (for Concurrency: fleet-1 more slots at once). fleet must be >= 1.
func LocalShare(l ratelimit.Limit, alg ratelimit.Algorithm, fleet, cost int64) ratelimit.Limit {
	div := func(v int64) int64 {
		if v == 0 {
			return 0
		}
		return (v + fleet - 1) / fleet
	}
	s := ratelimit.Limit{Rate: div(l.Rate), Per: l.Per, Burst: div(l.Burst), Max: div(l.Max), Calendar: l.Calendar}
	switch alg {
	case ratelimit.TokenBucket:
		s.Burst = max(s.Burst, cost)
	case ratelimit.Concurrency:
		s.Max = max(s.Max, cost)
	default:
		s.Rate = max(s.Rate, cost)
	}
	return s
}

// Close closes the store below and the local shares.
func (f *Fallback) Close() error {
	return errors.Join(f.inner.Close(), f.local.Close())
}

// Settle passes the settlements to the store below. Unlike Decide it has no
// failure mode to fall back to: an error of the store is returned, and the
// caller may retry with the same id (see Settler).
func (f *Fallback) Settle(ctx context.Context, id string, items []ratelimit.Settlement) (bool, error) {
	return ratelimit.SettleVia(ctx, f.inner, id, items)
}

var _ ratelimit.Settler = (*Fallback)(nil)
