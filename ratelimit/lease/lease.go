package lease

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

// Reserver is a Store that can also reserve blocks of units and give
// units back. redisstore.RedisStore is one.
type Reserver interface {
	ratelimit.Store
	// DecideReserve is Decide where want[i] > items[i].Cost asks a
	// non-shadow token-bucket item to take min(want[i], available) units
	// when the batch is admitted; taken[i] is what each item consumed. The
	// items must have passed ValidateItem: the caller validates them, once.
	DecideReserve(ctx context.Context, items []ratelimit.Item, want []int64) (d ratelimit.Decision, taken []int64, err error)
	// Refund gives each item's Cost back to its key.
	Refund(ctx context.Context, items []ratelimit.Item) error
}

// Options configures a Store. The zero value uses the defaults.
type Options struct {
	// Now is the clock of block ages and rate estimates; nil means
	// time.Now. Decisions in the store keep their own clock.
	Now func() time.Time
	// SweepEvery is how often a background sweep gives back the units of
	// expired blocks (see ReturnExpired). 0 means 100ms; a negative value
	// starts no sweeper, and the caller calls ReturnExpired itself.
	SweepEvery time.Duration
	// ReturnTimeout bounds each sweep's refund calls; 0 means 1s.
	ReturnTimeout time.Duration
	// Fleet, when set, returns the number of instances sharing the store
	// (see stack.Fleet.Size); a block is then sized for the larger of it and the
	// item's Lease.Instances. nil counts Lease.Instances alone.
	Fleet func() int64
	// AutoKeys bounds the keys of lease: auto items whose demand the store
	// tracks at once (see Store, Auto); 0 or less means 65,536. It
	// is shared out evenly between the store's shards, each keeping at
	// least one, so the bound is rounded up to a multiple of their number
	// (8 to 256, see leaseShards).
	AutoKeys int
}

// Stats counts what a Store did since it was created.
type Stats struct {
	// LocalAdmits is the leased items admitted from a local block, without
	// a store call.
	LocalAdmits int64
	// Reservations is the leased items sent to the store, each asking for
	// a block (the store call may carry other items too).
	Reservations int64
	// Returns is the refund calls made to give back unused units, and
	// ReturnedUnits the units they carried.
	Returns, ReturnedUnits int64
	// LostUnits is the units whose return failed: the fleet under-admits
	// by them until the bucket refills.
	LostUnits int64
	// AutoPassed is the Auto items sent to the store unleased, their
	// key's demand here being too low for a block to pay off.
	AutoPassed int64
	// AutoKeys is the keys whose demand is tracked now (at most
	// Options.AutoKeys); AutoEvicted counts the keys forgotten to
	// make room for a hotter one.
	AutoKeys, AutoEvicted int64
}

// Store is a ratelimit.Store that admits hot token-bucket keys from blocks of
// units reserved ahead, so that most of their decisions need no round trip.
//
// Items with Lease set (non-shadow, cost > 0) are leased; every other
// item goes to the wrapped store as it is. For a leased item, Decide takes
// the cost from this instance's block for the key when it holds enough.
// Otherwise the item goes to the store in the same call as the request's
// other items, asking for its cost less what the block still holds (the
// need) and reserving up to a new block on top: the script takes
// min(block, available) but at least the need, atomically with the other
// items of its hash tag, or denies with the exact retry time for the need.
// Reservation happens before admission, so the fleet never admits a unit
// that was not taken from the key's bucket: it never over-admits.
//
// All-or-nothing holds across leased and other items: when the store
// denies the request (or fails), the units it took from local blocks go
// back to those blocks.
//
// Block size. A block holds at most blockCap = min(MaxBlock,
// Burst/(2×n)), never less than the cost, where n is the larger of the
// item's Lease.Instances and the live fleet size (Options.Fleet). Within that, it is the
// units this instance is expected to admit in one TTL at the key's
// observed rate here (an average over the last reservations), so a cold
// key reserves only its cost and a hot one reserves full blocks. While one
// reservation for a key is in flight, other decisions for it wait for it
// once, then reserve only their need.
//
// Expiry and return. A block may be used for TTL after it was reserved;
// then its units are given back to the key (a refund, capped at Burst)
// by the next sweep, at most SweepEvery later. Close gives back every
// block.
//
// Worst under-admission. At any moment an instance holds at most
// blockCap units of a key, so the units that are out of the bucket but not
// admitted are at most instances × blockCap <= Burst/2 (with Instances
// set to the fleet size). A request that the bucket denies may therefore
// have fitted had the other instances not held their blocks: it is
// denied early by at most (instances−1) × blockCap units, for at most TTL
// + SweepEvery after those blocks were reserved. A failed return (store
// unavailable) loses its units until the bucket refills them (LostUnits),
// as does a reservation that times out.
//
// Burst. Units reserved before a bucket refilled can be admitted after it:
// over any interval the fleet admits at most what the bucket gave out in
// that interval and the TTL before it, that is at most Burst + held
// blocks (instances × blockCap) more than a single bucket would at once.
// Both bounds hold with instances the fleet size as this instance last
// knew it; while the fleet grows, an instance that has not yet seen the
// new size holds blocks sized for the old one (at most one heartbeat).
//
// Auto. An item whose Lease.Auto is set is leased only while this
// instance's own demand on its key makes a block pay off: an
// exponentially weighted count of the units asked here over about the
// last TTL (E) of at least 4 costs engages it, below 2 releases it (see
// lease_auto.go). While it is not leased, it goes to the wrapped store as
// an unleased item would (counted in Stats.AutoPassed). Its blocks
// are the larger of E and the rate between reservations times TTL, within
// [cost, blockCap]; without MaxBlock, blockCap is Burst/(2×n) alone. A
// key's E is kept in a table only once it is hot: before that, a sketch
// of fixed size (1 MiB) estimates it, and the key enters the table at 2
// costs. The table holds at most Options.AutoKeys keys (65,536); when
// full, a key enters only in place of a colder one, so keys asked once or
// twice, however many, cannot keep a hot key out. Keys quiet for two TTLs
// are forgotten.
//
// Results of leased items. Remaining is the key's remaining units as the
// store last reported them to this instance plus this instance's block
// (capped at Burst); ResetAfter is computed from it. They are estimates:
// other instances consume in the meantime.
//
// A Store is safe for concurrent use. Its keys are spread by hash
// over shards, each with a lock of its own, so decisions of different
// keys seldom wait for each other; decisions of one key share its block.
type Store struct {
	inner   Reserver
	now     func() time.Time
	timeout time.Duration
	fleet   func() int64 // nil: Lease.Instances alone

	// shards hold the blocks and demand estimates by key hash (see
	// lease_shard.go); len(shards) is a power of two, mask one less.
	shards []leaseShard
	seed   maphash.Seed
	mask   uint64
	// autoCap bounds the entries of each shard's auto table; autoKeys
	// counts those of all shards. They are pruned at most every
	// autoPruneEvery; autoPruned is when they last were, under pruneMu.
	autoCap    int
	autoKeys   atomic.Int64
	pruneMu    sync.Mutex
	autoPruned time.Time

	stats struct{ local, reserve, returns, returned, lost, passed, evicted atomic.Int64 }

	quit    chan struct{}
	stopped sync.WaitGroup
	once    sync.Once
}

var _ ratelimit.Store = (*Store)(nil)

// New returns a Store over inner, which it owns: Close
// closes it. Unless opts.SweepEvery is negative it starts a sweeper
// goroutine, which Close stops.
func New(inner Reserver, opts Options) *Store {
	s := &Store{
		inner:   inner,
		now:     opts.Now,
		timeout: opts.ReturnTimeout,
		fleet:   opts.Fleet,
		shards:  make([]leaseShard, leaseShards()),
		seed:    maphash.MakeSeed(),
		quit:    make(chan struct{}),
	}
	s.mask = uint64(len(s.shards) - 1)
	keys := opts.AutoKeys
	if keys <= 0 {
		keys = autoMaxKeys
	}
	// Rounded up without overflow: keys near the largest int stay positive.
	s.autoCap = keys/len(s.shards) + min(keys%len(s.shards), 1)
	for i := range s.shards {
		s.shards[i].blocks = make(map[string]*block)
		s.shards[i].auto = make(map[string]*autoRate)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.timeout <= 0 {
		s.timeout = time.Second
	}
	every := opts.SweepEvery
	if every == 0 {
		every = 100 * time.Millisecond
	}
	if every > 0 {
		s.stopped.Add(1)
		go s.sweeper(every)
	}
	return s
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{
		LocalAdmits:   s.stats.local.Load(),
		Reservations:  s.stats.reserve.Load(),
		Returns:       s.stats.returns.Load(),
		ReturnedUnits: s.stats.returned.Load(),
		LostUnits:     s.stats.lost.Load(),
		AutoPassed:    s.stats.passed.Load(),
		AutoKeys:      s.autoKeys.Load(),
		AutoEvicted:   s.stats.evicted.Load(),
	}
}

// leased reports whether Decide leases it.
func leased(it ratelimit.Item) bool { return it.Lease.Leased() && !it.Shadow && it.Cost > 0 }

// plan is what Decide does with one leased item.
type plan struct {
	b     *block
	local bool  // admitted from b
	from  int64 // units taken from b (the cost when local)
	need  int64 // units asked of the store (cost - from)
	want  int64 // units to reserve (>= need)
	first bool  // this reservation renews the block
	// reserved is set once the reservation is registered with b.
	reserved bool
}

// Decide decides items (see Store and ratelimit.Store). Invalid items or leases
// return an error wrapping ErrInvalid before anything is taken. An error
// of the wrapped store is returned as it is, after the local units are
// put back.
func (s *Store) Decide(ctx context.Context, items []ratelimit.Item) (ratelimit.Decision, error) {
	// A batch with nothing leased passes straight through: the wrapped
	// store validates it. Otherwise every item is validated here, once,
	// before any block is touched; DecideReserve trusts that.
	idx, plans, err := s.leasedItems(items)
	if err != nil {
		return ratelimit.Decision{}, err
	}
	if len(idx) == 0 {
		return s.inner.Decide(ctx, items)
	}
	if err := ctx.Err(); err != nil {
		unregister(idx, plans)
		return ratelimit.Decision{}, ratelimit.Unavailable("decide", err)
	}
	for _, i := range idx {
		if plans[i].b == nil {
			plans[i].b = s.blockFor(items[i])
		}
	}
	if err := s.takeLocal(ctx, items, idx, plans); err != nil {
		s.settle(items, idx, plans, nil, nil, false)
		return ratelimit.Decision{}, ratelimit.Unavailable("decide", err)
	}
	s.register(items, idx, plans)

	// The store decides every item not admitted locally.
	var sub []ratelimit.Item
	var want []int64
	var at []int // sub index -> item index
	for i, it := range items {
		p := &plans[i]
		if p.b != nil && p.local {
			continue
		}
		if p.b != nil {
			it.Cost = p.need
		}
		sub = append(sub, it)
		want = append(want, p.want)
		at = append(at, i)
	}
	var d ratelimit.Decision
	var taken []int64
	admitted := true
	if len(sub) > 0 {
		var err error
		d, taken, err = s.inner.DecideReserve(ctx, sub, want)
		if err != nil {
			s.settle(items, idx, plans, nil, nil, false)
			return ratelimit.Decision{}, err
		}
		admitted = d.Allowed
	}
	full := make([]ratelimit.Result, len(items))
	subTaken := make([]int64, len(items))
	for k, i := range at {
		full[i] = d.Results[k]
		if taken != nil {
			subTaken[i] = taken[k]
		}
	}
	s.settle(items, idx, plans, full, subTaken, admitted)

	return ratelimit.Summarize(items, full), nil
}

// leasedItems returns the indexes of the items a Store admits from
// blocks: the leased ones, Auto ones only while their demand here makes a
// block pay off. When there is one, it first validates every item and
// lease, so that nothing fails validation once blocks are touched; when
// there is none, it checks only the leases (the wrapped store validates
// the items). plans has one entry per item once an item is leased; the
// leased Auto items' blocks are in it already, registered under the same
// shard lock as their decision's demand estimate (see autoLeased).
func (s *Store) leasedItems(items []ratelimit.Item) (idx []int, plans []plan, err error) {
	for i, it := range items {
		if err := it.Lease.Check(it.Algorithm); err != nil {
			return nil, nil, fmt.Errorf("item %d: %w", i, err)
		}
	}
	var now time.Time
	for i, it := range items {
		if !leased(it) {
			continue
		}
		var b *block
		if it.Lease.Auto {
			if now.IsZero() {
				now = s.now()
			}
			var ok bool
			if b, ok = s.autoLeased(it, now); !ok {
				s.stats.passed.Add(1)
				continue
			}
		}
		if plans == nil {
			plans = make([]plan, len(items))
		}
		plans[i].b = b
		idx = append(idx, i)
	}
	if len(idx) == 0 {
		return nil, nil, nil
	}
	for i, it := range items {
		if plans[i].b != nil {
			continue // validated as its block was registered (registerValid)
		}
		if err := ratelimit.ValidateItem(it); err != nil {
			unregister(idx, plans)
			return nil, nil, fmt.Errorf("item %d: %w", i, err)
		}
	}
	return idx, plans, nil
}

// unregister undoes the registrations of the blocks in plans (see
// register) when Decide fails before using them.
func unregister(idx []int, plans []plan) {
	for _, i := range idx {
		if b := plans[i].b; b != nil {
			b.mu.Lock()
			b.users--
			b.mu.Unlock()
		}
	}
}

// blockFor returns the key's block, creating it, and registers the caller
// as a user.
func (s *Store) blockFor(it ratelimit.Item) *block {
	sh := s.shard(it.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.register(it)
}

// register returns the key's block in sh, creating it, and registers the
// caller as a user. sh.mu is held.
func (sh *leaseShard) register(it ratelimit.Item) *block {
	b := sh.blocks[it.Key]
	if b == nil {
		b = &block{}
		sh.blocks[it.Key] = b
	}
	b.mu.Lock()
	b.item = it
	b.users++
	if it.Lease.Auto {
		b.demand = sh.autoTarget(it)
	}
	b.mu.Unlock()
	return b
}

// takeLocal admits each leased item from its block when the block holds
// its cost. An item whose block is short while a reservation for the key
// is in flight waits for it and tries again, so that an instance has one
// reservation per key in flight while they succeed; once one was denied
// (or failed), the waiters go to the store together instead of one after
// another. It returns ctx's error if ctx ends while waiting.
//
// It never waits while holding a reservation of its own (register comes
// after), so decisions cannot wait on each other in a cycle.
func (s *Store) takeLocal(ctx context.Context, items []ratelimit.Item, idx []int, plans []plan) error {
	for _, i := range idx {
		p, cost := &plans[i], items[i].Cost
		for waited := false; ; waited = true {
			now := s.now()
			p.b.mu.Lock()
			p.b.lastSeen = now
			p.b.expire(now)
			if p.b.left >= cost {
				p.b.left -= cost
				p.local, p.from = true, cost
				p.b.mu.Unlock()
				break
			}
			if p.b.reserving == 0 || waited && p.b.denied {
				p.b.mu.Unlock()
				break
			}
			wake := p.b.wake
			p.b.mu.Unlock()
			select {
			case <-wake:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// register turns each leased item that its block could not admit into a
// reservation: it takes what the block holds toward the cost, and the
// first reservation in flight for the key asks for a whole new block.
func (s *Store) register(items []ratelimit.Item, idx []int, plans []plan) {
	for _, i := range idx {
		p, it := &plans[i], items[i]
		if p.local {
			continue
		}
		now := s.now()
		p.b.mu.Lock()
		p.b.expire(now)
		if p.b.left >= it.Cost { // a reservation landed meanwhile
			p.b.left -= it.Cost
			p.local, p.from = true, it.Cost
			p.b.mu.Unlock()
			continue
		}
		p.from, p.b.left = p.b.left, 0
		p.need = it.Cost - p.from
		p.want = p.need
		if p.b.reserving == 0 {
			p.first = true
			p.b.sample(now)
			p.want = max(p.need, p.b.target(it, s.instances(it))-p.from)
			p.b.wake = make(chan struct{})
		}
		p.b.reserving++
		p.reserved = true
		p.b.mu.Unlock()
		s.stats.reserve.Add(1)
	}
}

// instances is the number of instances a block of it is sized for: its
// Lease.Instances, or the live fleet size when that is larger; at least 1.
func (s *Store) instances(it ratelimit.Item) int64 {
	n := int64(max(it.Lease.Instances, 1))
	if s.fleet != nil {
		n = max(n, s.fleet())
	}
	return n
}

// settle applies the outcome to the blocks. admitted: local units are
// admitted and reservations fill their blocks. Otherwise (results nil
// means the store failed) every unit taken from a block goes back to it.
// It fills in the Results of leased items.
func (s *Store) settle(items []ratelimit.Item, idx []int, plans []plan, results []ratelimit.Result, taken []int64, admitted bool) {
	now := s.now()
	for _, i := range idx {
		p, it := &plans[i], items[i]
		b := p.b
		b.mu.Lock()
		if p.reserved {
			b.reserving--
		}
		switch {
		case admitted && p.local:
			b.used += it.Cost
			s.stats.local.Add(1)
		case admitted:
			b.used += it.Cost
			b.denied = false
			extra := taken[i] - p.need
			if extra > 0 {
				if b.left == 0 || p.first {
					b.reservedAt = now
				}
				b.left += extra
			}
			b.remaining = results[i].Remaining
		default:
			b.left += p.from
			if p.reserved {
				b.denied = true
			}
		}
		if p.reserved && b.reserving == 0 && b.wake != nil {
			close(b.wake)
			b.wake = nil
		}
		b.users--
		if results != nil {
			results[i] = leasedResult(b, it, p, results[i])
		}
		b.mu.Unlock()
	}
}

// leasedResult is the Result reported for a leased item, with b.mu held:
// the store's result (for a reservation) or an allowing one (for a local
// admission), with Remaining counting this instance's block and
// ResetAfter computed from Remaining. A denial keeps the store's exact
// RetryAfter for the need.
func leasedResult(b *block, it ratelimit.Item, p *plan, r ratelimit.Result) ratelimit.Result {
	if p.local {
		r = ratelimit.Result{Allowed: true, Remaining: b.remaining}
	}
	r.Limit = it.Limit.Burst
	r.Remaining = min(r.Remaining+b.left, it.Limit.Burst)
	r.ResetAfter = refillTime(it.Limit.Burst-r.Remaining, it.Limit)
	return r
}

// refillTime is how long a bucket of limit l takes to refill units,
// rounded up to the microsecond (ratelimit.RefillTime; at most a units of
// the bucket's burst, which fits).
func refillTime(units int64, l ratelimit.Limit) time.Duration {
	d, _ := ratelimit.RefillTime(units, l)
	return d
}

// Close stops the sweeper, gives back every block (under the return
// timeout) and closes the wrapped store.
func (s *Store) Close() error {
	s.once.Do(func() { close(s.quit) })
	s.stopped.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	_, _ = s.sweep(ctx, true)
	return s.inner.Close()
}

// Settle settles on the store below, on the key itself: the units of this
// instance's block (which were taken from the key when it was reserved)
// are left as they are, so a refund adds to the key what the request did
// not use, and a charge takes what it used beyond its reservation, whether
// the reservation came from a block or from the key.
func (s *Store) Settle(ctx context.Context, id string, items []ratelimit.Settlement) (bool, error) {
	return ratelimit.SettleVia(ctx, s.inner, id, items)
}

var _ ratelimit.Settler = (*Store)(nil)
