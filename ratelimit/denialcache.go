package ratelimit

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultDenialCacheSize is the number of keys a DenialCache remembers
// denials of when DenialCacheOptions.Size is 0.
const DefaultDenialCacheSize = 10_000

// DenialCacheOptions configure a DenialCache. Zero values take the defaults.
type DenialCacheOptions struct {
	// Now is the clock that measures how long ago a denial was made; nil
	// means time.Now. Only elapsed time matters, so it need not agree with
	// the store's clock.
	Now func() time.Time
	// Size is the most keys remembered at once (0: DefaultDenialCacheSize).
	// When full, expired denials are dropped first, then arbitrary ones; a
	// dropped denial only costs a store call.
	Size int
}

// DenialCache is a store layer that answers a batch the store below denied
// again without asking it, until the denial runs out.
//
// When the store denies a batch, every non-shadow item that denied had, by
// the store's exact RetryAfter, no room for its cost until T = then +
// RetryAfter. Capacity only returns with time (which T accounts for) or with
// a refund; other callers only take more. So until the earliest T of the
// batch's denied items, the same batch — the same keys, algorithms, limits
// and shadow flags in the same order, each cost the same or larger — is
// denied again: the DenialCache answers it with the remembered results,
// their RetryAfter and ResetAfter shortened by the time elapsed (Remaining
// is the remembered one, which may since have grown), without a store call.
//
// Concurrency items never make a denial remembered (a slot frees whenever
// its request ends): a batch is remembered only for its other denied items,
// under their keys, until the earliest of their RetryAfter.
//
// It never admits: it only repeats denials, so it never over-admits. A local
// denial is exact unless units went back to a denied key after the denial:
// a refund or settlement, a lease block returned on its TTL, or a limit that
// grew on reload (a changed limit does not match, though). Invalidate forgets
// a key's denials at once and must be called for refunds on this instance;
// another instance's refund is not seen, so there the local denial is
// conservative: it may refuse for at most the remaining RetryAfter a request
// that the refunded units would have admitted (never more than the units
// refunded, and only on this instance).
//
// A DenialCache is safe for concurrent use. Close closes the store below.
type DenialCache struct {
	inner Store
	now   func() time.Time
	size  int

	mu   sync.Mutex
	keys map[string]*denial // by the key of each denied non-shadow item
	// held is len(keys), written under mu, so that a Decide with nothing
	// remembered (the common case) takes no lock. A lookup that reads a
	// stale 0 only asks the store, which is always correct.
	held atomic.Int64

	local atomic.Uint64
}

// denial is one denied batch, remembered.
type denial struct {
	at    time.Time
	until time.Time // the earliest end of a denied item's RetryAfter
	items []Item    // Lease and OnError cleared: they do not matter here
	d     Decision
}

// NewDenialCache puts a DenialCache on inner, which it owns.
func NewDenialCache(inner Store, o DenialCacheOptions) *DenialCache {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Size <= 0 {
		o.Size = DefaultDenialCacheSize
	}
	return &DenialCache{inner: inner, now: o.Now, size: o.Size, keys: make(map[string]*denial)}
}

// Decide answers items from a remembered denial when one covers them (see
// DenialCache), and otherwise decides them on the store below, remembering
// the decision if it is a denial.
func (c *DenialCache) Decide(ctx context.Context, items []Item) (Decision, error) {
	if d, ok := c.lookup(items); ok {
		return d, nil
	}
	d, err := c.inner.Decide(ctx, items)
	if err == nil && !d.Allowed {
		c.remember(items, d)
	}
	return d, err
}

// lookup returns the remembered denial that covers items, as of now.
func (c *DenialCache) lookup(items []Item) (Decision, bool) {
	if c.held.Load() == 0 {
		return Decision{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for i := range items {
		if items[i].Shadow || items[i].Cost <= 0 {
			continue
		}
		e := c.keys[items[i].Key]
		if e == nil {
			continue
		}
		if !now.Before(e.until) || now.Before(e.at) {
			// Run out, or the clock went back: the elapsed time is unknown.
			c.forget(e)
			continue
		}
		if !e.covers(items) {
			continue
		}
		c.local.Add(1)
		return e.decisionAt(now.Sub(e.at)), true
	}
	return Decision{}, false
}

// covers reports whether items are e's batch with each cost the same or
// larger.
func (e *denial) covers(items []Item) bool {
	if len(items) != len(e.items) {
		return false
	}
	for i := range items {
		a, b := &items[i], &e.items[i]
		if a.Key != b.Key || a.Algorithm != b.Algorithm || a.Limit != b.Limit || a.Shadow != b.Shadow || a.Cost < b.Cost {
			return false
		}
	}
	return true
}

// decisionAt returns e's decision as it stands elapsed after it was made.
func (e *denial) decisionAt(elapsed time.Duration) Decision {
	d := e.d
	d.Results = slices.Clone(e.d.Results)
	for i := range d.Results {
		r := &d.Results[i]
		if r.RetryAfter > 0 {
			r.RetryAfter -= elapsed
		}
		r.ResetAfter = max(r.ResetAfter-elapsed, 0)
	}
	d.RetryAfter -= elapsed
	return d
}

// remember keeps a denial of items by the store below.
func (c *DenialCache) remember(items []Item, d Decision) {
	if len(d.Results) != len(items) || d.Failure != nil {
		return
	}
	var soonest time.Duration
	var denied []string
	for i := range items {
		if items[i].Shadow || d.Results[i].Allowed || items[i].Algorithm == Concurrency {
			// A concurrency slot can be released at any moment, on any
			// instance: its denial says nothing about the next request.
			continue
		}
		r := d.Results[i].RetryAfter
		if r <= 0 || items[i].Cost <= 0 {
			// Denied with no wait (a limit lowered below what is held):
			// nothing to say how long the denial lasts.
			return
		}
		if soonest == 0 || r < soonest {
			soonest = r
		}
		denied = append(denied, items[i].Key)
	}
	if len(denied) == 0 {
		return
	}
	now := c.now()
	e := &denial{at: now, until: now.Add(soonest), items: slices.Clone(items), d: d}
	e.d.Results = slices.Clone(d.Results)
	for i := range e.items {
		e.items[i].Lease, e.items[i].OnError = Lease{}, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.keys)+len(denied) > c.size {
		c.evict(now, len(denied))
	}
	for _, k := range denied {
		if old := c.keys[k]; old != nil {
			c.forget(old)
		}
		c.keys[k] = e
	}
	c.held.Store(int64(len(c.keys)))
}

// evict makes room for n keys: expired denials go first, then any. It
// frees an eighth of the size beyond n, so that a caller denied under many
// distinct keys pays the full scan of the map (under c.mu) once per
// size/8 denials remembered, not on every one. c.mu is held.
func (c *DenialCache) evict(now time.Time, n int) {
	target := max(c.size-c.size/8-n, 0)
	for _, e := range c.keys {
		if !now.Before(e.until) {
			c.forget(e)
		}
	}
	for _, e := range c.keys {
		if len(c.keys) <= target {
			return
		}
		c.forget(e)
	}
}

// forget drops e under every key it is kept by. c.mu is held.
func (c *DenialCache) forget(e *denial) {
	for i := range e.items {
		if c.keys[e.items[i].Key] == e {
			delete(c.keys, e.items[i].Key)
		}
	}
	c.held.Store(int64(len(c.keys)))
}

// Invalidate forgets every remembered denial of key, so that the next
// decision of it asks the store below. Call it when units go back to key on
// this instance (a refund, a settlement, a released concurrency slot).
func (c *DenialCache) Invalidate(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.keys[key]; e != nil {
		c.forget(e)
	}
}

// Len returns the number of keys with a remembered denial (expired ones
// included until they are dropped).
func (c *DenialCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.keys)
}

// LocalDenials returns how many batches the DenialCache has answered
// without the store below since it was created.
func (c *DenialCache) LocalDenials() uint64 { return c.local.Load() }

// Close closes the store below.
func (c *DenialCache) Close() error { return c.inner.Close() }
