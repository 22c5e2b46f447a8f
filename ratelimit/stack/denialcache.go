package stack

import (
	"context"
	"hash/maphash"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
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
	// Size is the most keys remembered at once (0: DefaultDenialCacheSize),
	// split evenly over the shards. When a key's shard is full, its expired
	// denials are dropped first, then those that run out soonest; a dropped
	// denial only costs a store call.
	Size int
	// ProbeWait bounds how long one request that found a key's denial run
	// out may ask the store alone (0: DefaultDenialProbeWait): the other
	// requests of that batch meanwhile keep the denial, with a RetryAfter
	// to the end of the wait, rather than all asking the store at once.
	// A negative value turns this off: every request asks the store.
	ProbeWait time.Duration
}

// DefaultDenialProbeWait is DenialCacheOptions.ProbeWait's default: longer
// than a store round trip on a healthy network, short enough that a store
// outage reaches the Fallback layer almost at once.
const DefaultDenialProbeWait = 20 * time.Millisecond

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
// A larger cost waits longer than the remembered one: it is answered only
// where its own wait follows exactly from the remembered results (a denied
// token bucket's wait grows by the refill time of the extra units; see
// denial.decisionFor), and otherwise asks the store, so that nobody is told
// to come back before the cost it asks for could fit.
//
// Concurrency items never make a denial remembered (a slot frees whenever
// its request ends): a batch is remembered only for its other denied items,
// under their keys, until the earliest of their RetryAfter. A batch with a
// shadow item on the key of an enforced one is never remembered: whether
// it is denied depends on whether the shadow item fits, which other
// callers can change either way (see shadowSharesKey).
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
// When a denial runs out, the first request that finds it so asks the
// store (the probe) while the other requests of the same batch keep the
// denial, for at most ProbeWait or until the probe's answer: a new denial
// replaces the old one, an admission or an error forgets it. Without this,
// every request in flight for a hot key would reach the store at each
// expiry. It can refuse, for at most ProbeWait per expiry, what the store
// would have admitted: units that accrued since the denial ran out (rate
// × ProbeWait at most) beyond what the probe itself takes; with the store
// failing, it delays its Fallback by at most ProbeWait once.
//
// A DenialCache is safe for concurrent use. Its keys are spread over up to
// 64 shards by a hash of the key, each with its own lock and its share of
// Size, so that lookups of different keys do not wait for one another.
// Close closes the store below.
type DenialCache struct {
	inner ratelimit.Store
	now   func() time.Time
	seed  maphash.Seed
	// shards hold the keys; a batch denied under several keys is kept in
	// each key's shard. len(shards) is a power of two.
	shards []denialShard
	// held counts the keys of all shards, so that a Decide with nothing
	// remembered (the common case) takes no lock. A lookup that reads a
	// stale 0 only asks the store, which is always correct.
	held atomic.Int64

	local     atomic.Uint64
	probeWait time.Duration // < 0: no probes
}

// denialShard is one lock's share of a DenialCache.
type denialShard struct {
	mu   sync.Mutex
	size int                // the most keys it holds
	keys map[string]*denial // by the key of each denied non-shadow item
	_    [40]byte           // keep shards on separate cache lines
}

// denial is one denied batch, remembered.
type denial struct {
	at    time.Time
	until time.Time        // the earliest end of a denied item's RetryAfter
	items []ratelimit.Item // Lease and OnError cleared: they do not matter here
	d     ratelimit.Decision
	// probe is when the probe of a run-out denial stops holding back the
	// others, in Unix nanoseconds (0: none yet). Atomic: a denial kept
	// under keys of several shards is reached under different locks.
	probe atomic.Int64
}

// denialShardKeys is the fewest keys per shard: a small cache keeps one
// shard (and so evicts exactly at Size); 10,000 keys make 32 shards.
const denialShardKeys = 256

// NewDenialCache puts a DenialCache on inner, which it owns.
func NewDenialCache(inner ratelimit.Store, o DenialCacheOptions) *DenialCache {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Size <= 0 {
		o.Size = DefaultDenialCacheSize
	}
	n := 1
	for n < 64 && 2*n*denialShardKeys <= o.Size {
		n *= 2
	}
	if o.ProbeWait == 0 {
		o.ProbeWait = DefaultDenialProbeWait
	}
	c := &DenialCache{inner: inner, now: o.Now, seed: maphash.MakeSeed(), shards: make([]denialShard, n), probeWait: o.ProbeWait}
	for i := range c.shards {
		sh := &c.shards[i]
		sh.size = o.Size / n
		if i < o.Size%n {
			sh.size++
		}
		sh.keys = make(map[string]*denial)
	}
	return c
}

// shard returns the shard of key.
func (c *DenialCache) shard(key string) *denialShard {
	return &c.shards[maphash.String(c.seed, key)&uint64(len(c.shards)-1)]
}

// Decide answers items from a remembered denial when one covers them (see
// DenialCache), and otherwise decides them on the store below, remembering
// the decision if it is a denial.
func (c *DenialCache) Decide(ctx context.Context, items []ratelimit.Item) (ratelimit.Decision, error) {
	d, ok, probe := c.lookup(items)
	if ok {
		return d, nil
	}
	d, err := c.inner.Decide(ctx, items)
	if err == nil && !d.Allowed {
		c.remember(items, d)
	}
	if probe != nil {
		c.endProbe(probe) // a denial just remembered stays
	}
	return d, err
}

// lookup returns the remembered denial that covers items, as of now. When
// it returns none, probe is the run-out denial this caller probes (nil
// when none): the caller must end the probe once the store has answered.
func (c *DenialCache) lookup(items []ratelimit.Item) (d ratelimit.Decision, ok bool, probe *denial) {
	if c.held.Load() == 0 {
		return ratelimit.Decision{}, false, nil
	}
	now := c.now()
	for i := range items {
		if items[i].Shadow || items[i].Cost <= 0 {
			continue
		}
		d, ok, probes := c.lookupKey(items[i].Key, items, now, probe)
		if ok {
			if probe != nil {
				c.endProbe(probe) // another key answers: no probe after all
			}
			return d, true, nil
		}
		if probes != nil {
			probe = probes
		}
	}
	return ratelimit.Decision{}, false, probe
}

// lookupKey returns the denial remembered under key if it covers items at
// now. A denial that ran out is dropped under key; under its other keys
// it is dropped when they are looked up (it has run out there too). When
// the caller becomes the probe of a run-out denial, probes is that denial.
// probing is the denial the caller already probes (under an earlier key
// of the batch, or the same key twice): it does not hold the caller back.
func (c *DenialCache) lookupKey(key string, items []ratelimit.Item, now time.Time, probing *denial) (d ratelimit.Decision, ok bool, probes *denial) {
	sh := c.shard(key)
	sh.mu.Lock()
	e := sh.keys[key]
	if e != nil && now.Before(e.at) {
		// The clock went back: the elapsed time is unknown.
		c.drop(sh, key)
		e = nil
	}
	if e != nil && !now.Before(e.until) {
		// Run out: one request of the batch asks the store while the
		// others hold back until its answer or the end of ProbeWait.
		// The caller that probes e (found under an earlier key of the
		// batch) goes to the store: it does not hold itself back.
		if c.probeWait < 0 || !e.covers(items) {
			c.drop(sh, key)
		} else if e != probing {
			if p := e.probe.Load(); p <= now.UnixNano() && e.probe.CompareAndSwap(p, now.Add(c.probeWait).UnixNano()) {
				probes = e
			} else if wait := time.Duration(e.probe.Load() - now.UnixNano()); wait > 0 {
				sh.mu.Unlock()
				c.local.Add(1)
				return e.decisionHeld(wait), true, nil
			}
		}
		e = nil
	}
	sh.mu.Unlock()
	// A denial's decision and items never change once remembered: they are
	// read without the lock.
	if e == nil || !e.covers(items) {
		return ratelimit.Decision{}, false, probes
	}
	d, ok = e.decisionFor(items, now.Sub(e.at))
	if !ok {
		return ratelimit.Decision{}, false, probes
	}
	c.local.Add(1)
	return d, true, nil
}

// endProbe forgets the run-out denial e under each key it is kept by, once
// its probe has the store's answer (or is not needed), so that the requests
// it held back are no longer held; a denial remembered since under one of
// those keys stays.
func (c *DenialCache) endProbe(e *denial) {
	for i := range e.items {
		k := e.items[i].Key
		sh := c.shard(k)
		sh.mu.Lock()
		if sh.keys[k] == e {
			c.drop(sh, k)
		}
		sh.mu.Unlock()
	}
}

// covers reports whether items are e's batch with each cost the same or
// larger.
func (e *denial) covers(items []ratelimit.Item) bool {
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

// decisionFor returns e's decision for items (which e covers) as it
// stands elapsed after it was made, or false when e cannot say how long
// items must wait.
//
// An item of the remembered cost keeps its remembered result. An item of a
// larger cost is answered only when its wait follows from what was
// remembered: a denied token-bucket item waits the remembered RetryAfter
// plus the time the bucket takes to refill the extra units, (cost −
// remembered cost) × Per / Rate rounded up to the microsecond (the store's
// own wait for that cost, or at most 1 µs more: each is rounded up); a
// denied fixed window waits to its end whatever the cost; an item that was
// allowed, with a Remaining at least the new cost, still fits. Any other
// larger cost (a denied sliding window or log, whose wait depends on how
// its count is spread over the window, or an allowed item the new cost
// may not fit) is left to the store: the remembered wait could be too
// early for it.
func (e *denial) decisionFor(items []ratelimit.Item, elapsed time.Duration) (ratelimit.Decision, bool) {
	d := e.decisionAt(elapsed)
	grown := false
	for i := range items {
		extra := items[i].Cost - e.items[i].Cost
		if extra == 0 {
			continue
		}
		r := &d.Results[i]
		switch {
		case r.Allowed && items[i].Cost <= r.Remaining:
		case !r.Allowed && items[i].Algorithm == ratelimit.FixedWindow:
			// A fixed window's wait is to its end, whatever the cost.
		case !r.Allowed && items[i].Algorithm == ratelimit.TokenBucket:
			more, ok := ratelimit.RefillTime(extra, items[i].Limit)
			if !ok || more > math.MaxInt64-r.RetryAfter {
				return ratelimit.Decision{}, false // a wait past any Duration: the store says
			}
			r.RetryAfter += more
			r.ResetAfter = max(r.ResetAfter, r.RetryAfter)
			grown = true
		default:
			return ratelimit.Decision{}, false
		}
	}
	if grown {
		d.RetryAfter = 0
		for i := range d.Results {
			if !d.Results[i].Allowed && !items[i].Shadow {
				d.RetryAfter = max(d.RetryAfter, d.Results[i].RetryAfter)
			}
		}
	}
	return d, true
}

// decisionAt returns e's decision as it stands elapsed after it was made.
func (e *denial) decisionAt(elapsed time.Duration) ratelimit.Decision {
	return e.decision(func(retry, reset time.Duration) (time.Duration, time.Duration) {
		return retry - elapsed, max(reset-elapsed, 0)
	})
}

// decisionHeld returns e's decision for a request held back while the
// denial's probe is out: each denied item waits until the probe ends.
func (e *denial) decisionHeld(wait time.Duration) ratelimit.Decision {
	return e.decision(func(_, reset time.Duration) (time.Duration, time.Duration) {
		return wait, min(reset, wait)
	})
}

// decision returns a copy of e's decision with the RetryAfter (of the
// decision and of each denied item) and every ResetAfter mapped by f.
func (e *denial) decision(f func(retry, reset time.Duration) (time.Duration, time.Duration)) ratelimit.Decision {
	d := e.d
	d.Results = slices.Clone(e.d.Results)
	for i := range d.Results {
		r := &d.Results[i]
		retry, reset := f(r.RetryAfter, r.ResetAfter)
		if r.RetryAfter > 0 {
			r.RetryAfter = retry
		}
		r.ResetAfter = reset
	}
	d.RetryAfter, _ = f(d.RetryAfter, 0)
	return d
}

// remember keeps a denial of items by the store below.
func (c *DenialCache) remember(items []ratelimit.Item, d ratelimit.Decision) {
	if len(d.Results) != len(items) || d.Failure != nil || shadowSharesKey(items) {
		return
	}
	var soonest time.Duration
	var denied []string
	for i := range items {
		if items[i].Shadow || d.Results[i].Allowed || items[i].Algorithm == ratelimit.Concurrency {
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
		e.items[i].Lease, e.items[i].OnError = ratelimit.Lease{}, 0
	}
	for _, k := range denied {
		sh := c.shard(k)
		sh.mu.Lock()
		if _, ok := sh.keys[k]; !ok && len(sh.keys) >= sh.size {
			c.evict(sh, now)
		}
		if _, ok := sh.keys[k]; !ok {
			c.held.Add(1)
		}
		// A denial k was kept under before stays under its other keys: it
		// is still true there until it runs out.
		sh.keys[k] = e
		sh.mu.Unlock()
	}
}

// shadowSharesKey reports whether a shadow item of items with a cost
// shares its key with a non-shadow item. Whether such a batch is denied
// depends on whether the shadow item fits: admitted, it takes its cost
// from the key before the items after it; refused (its own denial does
// not refuse the batch), it takes nothing. Other callers can turn it from
// admitted to refused at any moment, leaving more room for the enforced
// item than when the batch was denied, so its denial is not remembered.
func shadowSharesKey(items []ratelimit.Item) bool {
	for i := range items {
		if !items[i].Shadow || items[i].Cost <= 0 {
			continue
		}
		for j := range items {
			if !items[j].Shadow && items[j].Key == items[i].Key {
				return true
			}
		}
	}
	return false
}

// evict makes room in sh (locked) for one more key: expired denials go
// first, then those that run out soonest (the least worth keeping), by
// key among equals, so that which denials stay depends only on what was
// remembered, not on map order. It frees an eighth of the shard beyond
// that, so that a caller denied under many distinct keys pays the full
// scan (and sort) of the shard once per size/8 denials remembered, not
// on every one.
func (c *DenialCache) evict(sh *denialShard, now time.Time) {
	target := max(sh.size-sh.size/8-1, 0)
	for k, e := range sh.keys {
		if !now.Before(e.until) {
			c.drop(sh, k)
		}
	}
	if len(sh.keys) <= target {
		return
	}
	keys := make([]string, 0, len(sh.keys))
	for k := range sh.keys {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if n := sh.keys[a].until.Compare(sh.keys[b].until); n != 0 {
			return n
		}
		return strings.Compare(a, b)
	})
	for _, k := range keys[:len(keys)-target] {
		c.drop(sh, k)
	}
}

// drop forgets key in sh (locked).
func (c *DenialCache) drop(sh *denialShard, key string) {
	delete(sh.keys, key)
	c.held.Add(-1)
}

// Invalidate forgets every remembered denial of key, under each key it is
// kept by, so that the next decision of key (alone or in the batch that
// was denied) asks the store below. Call it when units go back to key on
// this instance (a refund, a settlement, a released concurrency slot).
func (c *DenialCache) Invalidate(key string) {
	sh := c.shard(key)
	sh.mu.Lock()
	e := sh.keys[key]
	if e != nil {
		c.drop(sh, key)
	}
	sh.mu.Unlock()
	if e == nil {
		return
	}
	for i := range e.items {
		k := e.items[i].Key
		if k == key {
			continue
		}
		sh := c.shard(k)
		sh.mu.Lock()
		if sh.keys[k] == e {
			c.drop(sh, k)
		}
		sh.mu.Unlock()
	}
}

// Len returns the number of keys with a remembered denial (expired ones
// included until they are dropped).
func (c *DenialCache) Len() int { return int(c.held.Load()) }

// LocalDenials returns how many batches the DenialCache has answered
// without the store below since it was created.
func (c *DenialCache) LocalDenials() uint64 { return c.local.Load() }

// Close closes the store below.
func (c *DenialCache) Close() error { return c.inner.Close() }

// Settle passes the settlements to the store below (see Settler). A
// settlement that gives units back (Delta < 0) forgets the key's
// remembered denials first, so that the next decision asks the store.
func (c *DenialCache) Settle(ctx context.Context, id string, items []ratelimit.Settlement) (bool, error) {
	for i := range items {
		if items[i].Delta < 0 {
			c.Invalidate(items[i].Item.Key)
		}
	}
	return ratelimit.SettleVia(ctx, c.inner, id, items)
}

var _ ratelimit.Settler = (*DenialCache)(nil)
