package stack

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/memstore"
)

// Options configure a Stack. Zero values take the defaults.
type Options struct {
	// Breaker, when not nil, is the circuit breaker of the backend (it may
	// be the backend itself, or lie below it): Health reports its state
	// and a refused decision's RetryAfter is its cooldown.
	Breaker *Breaker
	// Ping reports whether the backend answers; nil means it always does.
	Ping func(ctx context.Context) error
	// Now is the clock of the in-process stores: the memory backend when
	// New is given none, and the Fallback's local shares. nil = time.Now.
	Now func() time.Time
	// FleetSize is the number of instances sharing the backend, which
	// sizes the local shares (see FallbackOptions); 0 or less means 1.
	// With a Fleet it is unused: the Fleet's size sizes them.
	FleetSize int
	// Fleet, when not nil, counts the instances sharing the backend (the
	// local shares follow its Size); the Stack owns it and closes it
	// first in Close. nil means a Fleet of this instance alone with floor
	// FleetSize, that is a size of exactly FleetSize.
	Fleet *Fleet
	// DenialCacheSize is the most keys whose denials the Stack answers
	// again without the backend (see DenialCache); 0 means
	// DefaultDenialCacheSize, and a negative value keeps no DenialCache.
	DenialCacheSize int
	// Slots releases and renews the concurrency slots that the backend
	// takes (see SlotStore); nil means the backend itself when it is a
	// SlotStore. A backend that is neither keeps slots that only expire.
	Slots ratelimit.SlotStore
	// Wrap, when not nil, is given the Stack's top layer (the Fallback)
	// and returns the store that Decide goes through: a layer that
	// changes items before every other layer sees them, such as the
	// granted limits of cross-region items (package ratelimit/regional).
	// Close closes the store it returns before the Fallback; that store
	// must not close the Fallback itself.
	Wrap func(ratelimit.Store) ratelimit.Store
}

// Stack is a complete decision store: a backend (a memstore.Store, or a
// Redis store with leases behind a circuit breaker, see package redisstore)
// under a DenialCache (denials repeated locally until they run out) under a
// Fallback layer that applies each item's OnError when the backend
// cannot decide, and the fleet membership (see Fleet) that sizes the
// Fallback's local shares. Its Decide therefore returns an error only for items
// without a valid OnError; a failure of the backend is in
// Decision.Failure. A Stack is safe for concurrent use.
type Stack struct {
	top     *Fallback
	decider ratelimit.Store // top, or what Options.Wrap made of it
	backend ratelimit.Store // below the DenialCache: where reads go (see Read)
	denials *DenialCache    // nil without one
	fleet   *Fleet
	breaker *Breaker
	ping    func(ctx context.Context) error
	slots   ratelimit.SlotStore // nil when the backend keeps no slots
}

// Health is what a Stack reports about its backend.
type Health struct {
	// Breaker is the worst state of the backend's circuit breaker over its
	// failure domains; BreakerClosed without a breaker.
	Breaker BreakerState
	// AllDown reports that no decision can reach the backend right now:
	// every failure domain's breaker is open.
	AllDown bool
}

// New puts backend, which the Stack owns from then on, under a
// Fallback. A nil backend is a memstore.Store of this process, on o.Now.
func New(backend ratelimit.Store, o Options) *Stack {
	if backend == nil {
		backend = memstore.New(memstore.Options{Now: o.Now})
	}
	if o.Slots == nil {
		o.Slots, _ = backend.(ratelimit.SlotStore)
	}
	fleet := o.Fleet
	if fleet == nil {
		fleet = NewFleet(FleetOptions{Floor: o.FleetSize})
	}
	fo := FallbackOptions{Now: o.Now, Fleet: fleet.Size}
	if o.Breaker != nil {
		fo.RetryAfter = o.Breaker.cooldown
	}
	s := &Stack{backend: backend, breaker: o.Breaker, ping: o.Ping, slots: o.Slots, fleet: fleet}
	if o.DenialCacheSize >= 0 {
		s.denials = NewDenialCache(backend, DenialCacheOptions{Now: o.Now, Size: o.DenialCacheSize})
		backend = s.denials
	}
	s.top = NewFallback(backend, fo)
	s.decider = s.top
	if o.Wrap != nil {
		s.decider = o.Wrap(s.top)
	}
	return s
}

// Invalidate forgets the remembered denials of key (see
// DenialCache.Invalidate): call it when units go back to key.
func (s *Stack) Invalidate(key string) {
	if s.denials != nil {
		s.denials.Invalidate(key)
	}
}

// LocalDenials returns how many batches the Stack denied again without
// the backend (see DenialCache); 0 without a DenialCache.
func (s *Stack) LocalDenials() uint64 {
	if s.denials == nil {
		return 0
	}
	return s.denials.LocalDenials()
}

// FleetSize returns the number of instances sharing the backend, as the
// local shares use it now (see Fleet.Size).
func (s *Stack) FleetSize() int64 { return s.fleet.Size() }

// Fleet returns the Stack's fleet membership.
func (s *Stack) Fleet() *Fleet { return s.fleet }

// Decide decides items on the backend, or by their OnError when it fails
// (see Fallback).
func (s *Stack) Decide(ctx context.Context, items []ratelimit.Item) (ratelimit.Decision, error) {
	return s.decider.Decide(ctx, items)
}

// Wrapped returns the store that Options.Wrap made of the Stack's top
// layer (such as a regional layer, which the quota endpoint asks for its
// views), nil without Options.Wrap.
func (s *Stack) Wrapped() ratelimit.Store {
	if s.decider == ratelimit.Store(s.top) {
		return nil
	}
	return s.decider
}

// Read reports the state of items without deciding anything: each must
// cost 0 (the batch then consumes and writes nothing; an item of another
// cost is ErrInvalid, before any store call). It is for the reads that no
// policy counts, such as a caller asking for its quotas, and differs from
// Decide in three ways, so that a read's failure is never a decision's:
//
//   - It skips the Fallback: when the backend cannot answer, Read returns
//     its error (wrapping ErrUnavailable); no item's OnError applies.
//   - It skips the DenialCache: it neither answers from remembered
//     denials nor remembers any.
//   - With Options.Breaker it goes through Breaker.Read: it is
//     refused at once (an error wrapping ErrUnavailable and
//     ratelimit.ErrBreakerOpen, no store call) unless the failure domain of items is
//     closed, and its outcome is not recorded, so failed reads never open
//     the breaker that decisions share, a successful one never closes it,
//     and a read is never the half-open probe. Without one, it goes to the
//     backend's Decide.
//
// Read bounds nothing itself: the caller bounds how often it reads and how
// many items one read carries (each item is store work, a key read).
func (s *Stack) Read(ctx context.Context, items []ratelimit.Item) (ratelimit.Decision, error) {
	for i := range items {
		if items[i].Cost != 0 {
			return ratelimit.Decision{}, fmt.Errorf("item %d: %w: a read costs 0, got %d", i, ratelimit.ErrInvalid, items[i].Cost)
		}
	}
	if s.breaker != nil {
		return s.breaker.Read(ctx, items)
	}
	return s.backend.Decide(ctx, items)
}

// Release frees the concurrency slots of items, taken by an earlier
// Decide (see SlotStore), in the backend and in the local shares (a slot
// taken while the backend was down lives there). The backend is skipped
// while its breaker is open: its slots then free themselves after their
// Limit.Per. The local shares are skipped while they hold no slot: until
// a Concurrency item was decided there, and again once every slot taken
// or renewed there has expired on their clock. Items that no store is asked
// about are still checked as SlotStore requires (ErrInvalid). It returns
// the failures joined; a slot whose release failed frees itself the same
// way.
func (s *Stack) Release(ctx context.Context, items []ratelimit.Item) error {
	if len(items) == 0 {
		return nil
	}
	backend, local := s.backendSlots(), s.top.localHolds()
	if !backend && !local {
		return ratelimit.CheckSlotItems(items)
	}
	var err error
	if backend {
		err = s.slots.Release(ctx, items)
	}
	if local {
		err = errors.Join(err, s.top.local.Release(ctx, items))
	}
	return err
}

// Renew extends the concurrency slots of items (see SlotStore), in the
// backend and in the local shares, as Release. Only the backend takes back
// a slot it no longer holds (the local shares hold only the slots taken
// while it was down): a slot is lost when the backend lost it and the
// local shares do not hold it. While the backend's breaker is open, or
// when the backend keeps no slots, no slot is known to be lost (nor taken
// back): a slot the backend granted is renewed nowhere then, and is
// found out at the first renewal that reaches the backend again.
func (s *Stack) Renew(ctx context.Context, items []ratelimit.Item) ([]int, error) {
	r, err := s.RenewReport(ctx, items)
	return r.Lost, err
}

// RenewReport is Renew, reporting the slots the backend took back too
// (see RenewReporter; none when the backend's Slots is not one). A reply
// of the backend that is not a Renewal of items (an index out of range,
// twice, or out of order) is its failure, wrapping ErrUnavailable, and
// reports nothing. The local shares are renewed only while they may hold
// a slot (as for Release), whether or not the backend is used. They
// extend only the slots they hold and never take one back, so a slot the
// backend granted never moves into them, nor keeps them in use. With
// neither store to renew (the backend's breaker open, no local slot), the
// items are only checked as SlotStore requires (ErrInvalid), and nothing
// is reported.
func (s *Stack) RenewReport(ctx context.Context, items []ratelimit.Item) (ratelimit.Renewal, error) {
	if len(items) == 0 {
		return ratelimit.Renewal{}, nil
	}
	backend := s.backendSlots()
	if !s.top.localHolds() {
		// The local shares hold no slot: renewing there would find each
		// item gone, renew nothing and list every item.
		if backend {
			return ratelimit.RenewWith(ctx, s.slots, items)
		}
		return ratelimit.Renewal{}, ratelimit.CheckSlotItems(items)
	}
	local, lerr := s.top.renewLocal(ctx, items)
	if !backend {
		return ratelimit.Renewal{}, lerr
	}
	remote, err := ratelimit.RenewWith(ctx, s.slots, items)
	if lerr != nil {
		return ratelimit.Renewal{}, errors.Join(err, lerr)
	}
	// Both lists are increasing: keep the indexes in both.
	return ratelimit.Renewal{Retaken: remote.Retaken, Lost: ratelimit.IntersectSorted(remote.Lost, local.Lost)}, err
}

var _ ratelimit.RenewReporter = (*Stack)(nil)

// backendSlots reports whether slots are released and renewed in the
// backend: it keeps slots and its breaker lets calls through.
func (s *Stack) backendSlots() bool {
	return s.slots != nil && (s.breaker == nil || !s.breaker.AllOpen())
}

// Health reports the state of the backend's breaker. It does not contact
// the backend (see Ping).
func (s *Stack) Health() Health {
	if s.breaker == nil {
		return Health{}
	}
	return Health{Breaker: s.breaker.State(), AllDown: s.breaker.AllOpen()}
}

// BreakerStates reports the state of each of the breaker's failure domains
// by name (see Breaker.States: a Redis Cluster primary's address, or "" for
// a single domain); nil without a breaker.
func (s *Stack) BreakerStates() map[string]BreakerState {
	if s.breaker == nil {
		return nil
	}
	return s.breaker.States()
}

// Ping asks the backend whether it answers, within ctx.
func (s *Stack) Ping(ctx context.Context) error {
	if s.ping == nil {
		return nil
	}
	return s.ping(ctx)
}

// Close leaves the fleet, closes the layer of Options.Wrap, then the
// backend and the local shares.
// Decide must not be called after. A failure to leave is not reported:
// the registration expires on its own after its TTL.
func (s *Stack) Close() error {
	_ = s.fleet.Close()
	if s.decider != ratelimit.Store(s.top) {
		_ = s.decider.Close()
	}
	return s.top.Close()
}

// Settle settles on the backend (see Settler): a refund also forgets the
// key's remembered denials. Settlements apply to the backend only: units
// reserved on a Fallback's local share (the backend was down) are not
// settled.
func (s *Stack) Settle(ctx context.Context, id string, items []ratelimit.Settlement) (bool, error) {
	return s.top.Settle(ctx, id, items)
}

var _ ratelimit.Settler = (*Stack)(nil)
