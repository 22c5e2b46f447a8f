package lease

import (
	"math"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
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
	// autoAdmit is the heat, in costs of the key's request, from which a
	// key enters the auto table. Until then its demand is kept in the
	// shard's heat sketch alone (see lease_heat.go), so a key asked once
	// costs no entry, and a spray of distinct cold keys cannot fill the
	// table.
	autoAdmit = autoRelease
	// autoMaxKeys is the default bound of the keys whose rate an instance
	// tracks (Options.AutoKeys).
	autoMaxKeys = 1 << 16
	// autoEvictSample is how many entries of a full shard a key hot
	// enough to enter compares itself with: it takes the place of the
	// coldest of them, if that one is colder than it.
	autoEvictSample = 8
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
	cost    int64 // of the last decision
	engaged bool
}

// heat is E as of now in costs of the last decision: how far the key is
// from engaging, comparable between keys of different costs and TTLs.
func (a *autoRate) heat(now time.Time) float64 {
	e := a.rate * a.ttl.Seconds()
	if dt := now.Sub(a.last); dt > 0 {
		e *= math.Exp(-dt.Seconds() / a.ttl.Seconds())
	}
	return e / float64(a.cost)
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
	a.ttl, a.cost = ttl, cost
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
// the store is asked again). When it is leased and valid (see
// ValidateItem), b is the key's block with the caller registered as a
// user (see blockFor), so that a leased decision takes the shard's lock
// once; an invalid item registers nothing (b is nil), its batch fails
// validation before any block is used.
//
// A key enters the auto table only once the shard's heat sketch
// estimates its demand at autoAdmit costs or more, and, while the
// shard's part of the table is full, only in place of a colder entry
// (see evictColder); until then the sketch alone counts it. Its E starts
// at autoAdmit costs, what the sketch estimates of a key whose cells
// collide with none at the instant it crosses the threshold (a little
// less than the estimate when the decisions came over time): an estimate
// that collisions inflated never engages a lease by itself, the key must
// still be asked autoEngage − autoAdmit costs more.
func (s *Store) autoLeased(it ratelimit.Item, now time.Time) (b *block, leased bool) {
	h := s.hash(it.Key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	a := sh.auto[it.Key]
	if a == nil {
		if sh.heat == nil {
			sh.heat = newHeatSketch(heatSketchWidth(len(s.shards)))
		}
		cost := float64(it.Cost)
		est := sh.heat.add(h, now, it.Cost, it.Lease.TTL)
		if est < autoAdmit*cost {
			return sh.registerHeld(it, now)
		}
		if len(sh.auto) >= s.autoCap {
			if a = s.evictColder(sh, now, est/cost); a == nil {
				return sh.registerHeld(it, now)
			}
		} else {
			a = new(autoRate)
			s.autoKeys.Add(1)
		}
		*a = autoRate{rate: (autoAdmit*cost - cost) / it.Lease.TTL.Seconds(), last: now}
		sh.auto[it.Key] = a
	}
	a.observe(now, it.Cost, it.Lease.TTL)
	if a.engaged {
		return sh.registerValid(it), true
	}
	return sh.registerHeld(it, now)
}

// registerHeld is autoLeased's answer for a key not engaged: leased when
// this instance holds units of it (see holds). sh.mu is held.
func (sh *leaseShard) registerHeld(it ratelimit.Item, now time.Time) (*block, bool) {
	if !sh.holds(it.Key, now) {
		return nil, false
	}
	return sh.registerValid(it), true
}

// registerValid registers the caller with the key's block (see register)
// and returns it, unless it is invalid (nil): a block's item must stay one
// the store accepts, for its units to be given back. sh.mu is held.
func (sh *leaseShard) registerValid(it ratelimit.Item) *block {
	if ratelimit.ValidateItem(it) != nil {
		return nil
	}
	return sh.register(it)
}

// evictColder makes room in sh's full auto table for a key of heat (in
// costs) at now: it forgets the coldest of autoEvictSample entries (the
// first the map's randomized order gives) when that one is colder than
// the newcomer, and returns its estimate for the newcomer to reuse; nil
// when none was colder. An entry is therefore only ever replaced by a
// hotter key. sh.mu is held.
func (s *Store) evictColder(sh *leaseShard, now time.Time, heat float64) *autoRate {
	var coldKey string
	var cold *autoRate
	coldest := math.Inf(1)
	n := 0
	for key, a := range sh.auto {
		if h := a.heat(now); h < coldest {
			coldKey, cold, coldest = key, a, h
		}
		if n++; n == autoEvictSample {
			break
		}
	}
	if coldest >= heat {
		return nil
	}
	delete(sh.auto, coldKey)
	s.stats.evicted.Add(1)
	return cold
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
func (sh *leaseShard) autoTarget(it ratelimit.Item) float64 {
	if a := sh.auto[it.Key]; a != nil {
		return a.rate * it.Lease.TTL.Seconds()
	}
	return 0
}

// pruneAuto forgets the keys that had no decision for two of their TTLs,
// one shard at a time. No shard lock is held.
func (s *Store) pruneAuto(now time.Time) {
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
