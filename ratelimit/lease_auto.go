package ratelimit

import (
	"math"
	"time"
)

// Auto leasing. An item with Lease.Auto is leased only while this
// instance's own demand on its key makes a block pay off. Every decision
// of such an item feeds an exponentially weighted rate of the key, with a
// time constant of the lease TTL, so that rate × TTL is about the units
// asked for here in the last TTL (E). A reservation costs one store call
// and its unused units one refund, so a block pays off once it serves a
// few requests: the key is leased from E >= autoEngage costs and stops
// being leased below autoRelease costs (the gap keeps a key near the
// threshold from switching on every request). While it is not leased, its
// decisions go to the store like unleased ones (exact Remaining, no units
// held). A block is then E units, within [cost, blockCap] (see target).
const (
	autoEngage  = 4
	autoRelease = 2
	// autoMaxKeys bounds the keys whose rate an instance tracks. A key
	// seen while the table is full (and nothing in it has gone quiet) is
	// not tracked, so not leased, until room is made.
	autoMaxKeys = 1 << 16
	// autoPruneEvery is how often the table is scanned for keys that went
	// quiet (no decision for two TTLs: E has fallen below e^-2 of what it
	// was), at most.
	autoPruneEvery = time.Second
)

// autoRate is this instance's demand estimate of one Auto key.
type autoRate struct {
	// rate is the units asked per second, as of last.
	rate    float64
	last    time.Time
	ttl     time.Duration
	engaged bool
}

// observe folds cost units asked at now into the estimate: the rate
// decays by e^(−Δt/TTL) since the last observation, then gains cost/TTL.
// A clock that went backwards decays nothing.
func (a *autoRate) observe(now time.Time, cost int64, ttl time.Duration) {
	tau := ttl.Seconds()
	if dt := now.Sub(a.last); !a.last.IsZero() && dt > 0 {
		a.rate *= math.Exp(-dt.Seconds() / tau)
	}
	if a.last.IsZero() || now.After(a.last) {
		a.last = now
	}
	a.ttl = ttl
	a.rate += float64(cost) / tau
	e := a.rate * tau
	switch {
	case !a.engaged && e >= float64(autoEngage*cost):
		a.engaged = true
	case a.engaged && e < float64(autoRelease*cost):
		a.engaged = false
	}
}

// autoLeased records a decision of the Auto item it at now and reports
// whether to lease it: while its demand is engaged, or while this
// instance holds or is reserving units of the key (they are used before
// the store is asked again).
func (s *LeaseStore) autoLeased(it Item, now time.Time) bool {
	sh := s.shard(it.Key)
	sh.mu.Lock()
	a := sh.auto[it.Key]
	if a == nil && s.autoKeys.Load() >= autoMaxKeys && s.autoPruneDue(now, autoPruneEvery/10) {
		// The prune takes every shard's lock in turn: not while this one
		// is held.
		sh.mu.Unlock()
		s.pruneAuto(now)
		sh.mu.Lock()
		a = sh.auto[it.Key]
	}
	defer sh.mu.Unlock()
	if a == nil {
		if !s.autoAdmit() {
			return sh.holds(it.Key, now)
		}
		a = &autoRate{}
		sh.auto[it.Key] = a
	}
	a.observe(now, it.Cost, it.Lease.TTL)
	return a.engaged || sh.holds(it.Key, now)
}

// autoAdmit takes room for one more key in the auto tables, unless they
// hold autoMaxKeys already.
func (s *LeaseStore) autoAdmit() bool {
	for {
		n := s.autoKeys.Load()
		if n >= autoMaxKeys {
			return false
		}
		if s.autoKeys.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// holds reports whether this instance holds unexpired units of key at
// now, or is reserving some. sh.mu is held.
func (sh *leaseShard) holds(key string, now time.Time) bool {
	b := sh.blocks[key]
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expire(now)
	return b.left > 0 || b.reserving > 0
}

// autoTarget is the block to reserve for the Auto item it: E units, the
// demand of the last TTL. sh.mu is held.
func (sh *leaseShard) autoTarget(it Item) float64 {
	if a := sh.auto[it.Key]; a != nil {
		return a.rate * it.Lease.TTL.Seconds()
	}
	return 0
}

// pruneAuto forgets the keys that had no decision for two of their TTLs,
// one shard at a time. No shard lock is held.
func (s *LeaseStore) pruneAuto(now time.Time) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for key, a := range sh.auto {
			if now.Sub(a.last) >= 2*a.ttl {
				delete(sh.auto, key)
				s.autoKeys.Add(-1)
			}
		}
		sh.mu.Unlock()
	}
}
