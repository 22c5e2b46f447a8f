package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Now returns the current time; the store reads it once per Decide,
	// after locking the batch's keys. nil means time.Now. A clock that goes
	// backwards creates no capacity (see Apply).
	Now func() time.Time
	// Shards is the number of independently locked parts of the key space,
	// rounded up to a power of two (at most 65536). 0 or less means 64.
	Shards int
}

const (
	memDefaultShards = 64
	memMaxShards     = 1 << 16
	// memMinSweep is the number of entries a shard may hold before its first
	// sweep of expired keys.
	memMinSweep = 128
)

// Store is a ratelimit.Store that keeps every key's state in this process.
//
// It decides a whole batch atomically: it locks the shards of the batch's
// keys in ascending order (so concurrent batches cannot deadlock), evaluates
// every item, and consumes only if every non-shadow item allowed. Items of
// the same key within one batch are evaluated in order, each seeing the
// costs that the earlier ones would take.
//
// A key lives until the TTL that Apply gives its state has passed on the
// store's clock; an expired key is exactly an absent (full) one. Expired
// keys are removed when a batch touches them, and each shard sweeps itself
// whenever it has doubled in size since its last sweep, so memory stays
// proportional to the number of live keys. A key holds the state of one
// algorithm: using it with another starts it afresh.
//
// Store is safe for concurrent use. It starts no goroutine. Create
// one with New; the zero value is not usable.
type Store struct {
	now    func() time.Time
	seed   maphash.Seed
	shards []memShard
	mask   uint64
	closed atomic.Bool

	// settled holds the ids of recent settlements (see Settle) and when
	// each is forgotten (µs); markMu is taken after the shards' locks.
	markMu  sync.Mutex
	settled map[string]int64
	markAt  int // the size at which settled is next swept
}

var (
	_ ratelimit.SlotStore     = (*Store)(nil)
	_ ratelimit.RenewReporter = (*Store)(nil)
	_ ratelimit.Settler       = (*Store)(nil)
)

type memShard struct {
	mu   sync.Mutex
	keys map[string]memEntry
	// sweepAt is the number of entries at which the next sweep runs.
	sweepAt int
	_       [40]byte // keeps neighbouring shards' locks off one cache line
}

type memEntry struct {
	alg ratelimit.Algorithm
	// expires is the Unix time in µs from which the entry is absent.
	expires int64
	st      ratelimit.State
}

// New returns an empty Store.
func New(opts Options) *Store {
	n := opts.Shards
	if n <= 0 {
		n = memDefaultShards
	}
	n = min(n, memMaxShards)
	size := 1
	for size < n {
		size *= 2
	}
	s := &Store{
		now:    opts.Now,
		seed:   maphash.MakeSeed(),
		shards: make([]memShard, size),
		mask:   uint64(size - 1),
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.settled, s.markAt = make(map[string]int64), memMinSweep
	for i := range s.shards {
		s.shards[i].keys = make(map[string]memEntry)
		s.shards[i].sweepAt = memMinSweep
	}
	return s
}

// memSlot is the working copy of one distinct key of a batch.
type memSlot struct {
	key     string
	shard   int
	found   bool // the map holds an entry for key, live or expired
	expired bool // that entry has expired and must be removed
	has     bool // st is a live state (otherwise the key is absent)
	dirty   bool // st must be written back
	alg     ratelimit.Algorithm
	st      ratelimit.State
	ttl     time.Duration
}

// Decide decides items as one atomic group at the store's current time.
//
// It returns an error wrapping ErrInvalid, without deciding anything, if any
// item is invalid (see ValidateItem), and one wrapping ErrUnavailable if ctx
// is already done or the store is closed. It does not otherwise watch ctx:
// it never blocks on anything but its own short critical sections.
func (s *Store) Decide(ctx context.Context, items []ratelimit.Item) (ratelimit.Decision, error) {
	if err := ctx.Err(); err != nil {
		return ratelimit.Decision{}, fmt.Errorf("%w: %w", ratelimit.ErrUnavailable, err)
	}
	if s.closed.Load() {
		return ratelimit.Decision{}, fmt.Errorf("%w: memory store closed", ratelimit.ErrUnavailable)
	}
	for i := range items {
		if err := ratelimit.ValidateItem(items[i]); err != nil {
			return ratelimit.Decision{}, fmt.Errorf("item %d: %w", i, err)
		}
	}
	d := ratelimit.Decision{Allowed: true, Results: make([]ratelimit.Result, len(items))}
	if len(items) == 0 {
		return d, nil
	}

	var slotBuf [4]memSlot
	var ofBuf, lockBuf [8]int
	slots, slotOf, locks := s.slots(len(items), func(i int) string { return items[i].Key }, slotBuf[:0], ofBuf[:0], lockBuf[:0])
	s.lock(locks)
	defer s.unlock(locks)

	now := s.now().UnixMicro()
	s.load(slots, now)
	for i := range items {
		it := &items[i]
		r := s.step(&slots[slotOf[i]], it, now)
		d.Results[i] = r
		d.Fold(r, it.Shadow)
	}

	if !d.Allowed && anyDirty(slots) {
		// Nothing is consumed: report every item as evaluated without
		// taking its own cost (earlier items of the same key still count,
		// as they did for the decision).
		s.load(slots, now)
		for i := range items {
			sl := &slots[slotOf[i]]
			_, d.Results[i], _ = ratelimit.Apply(items[i].Algorithm, sl.state(items[i].Algorithm), now, items[i].Cost, items[i].Limit, false)
			s.step(sl, &items[i], now)
		}
		for k := range slots {
			slots[k].dirty = false
		}
	}
	s.commit(slots, now)
	for i := range d.Results {
		d.Results[i].DecidedAt = now
	}
	return d, nil
}

// slots returns the distinct keys of n items (key(i) is item i's) as
// slots, the slot of each item, and the ascending shards to lock; the
// slices given are reused.
func (s *Store) slots(n int, key func(int) string, slots []memSlot, slotOf, locks []int) ([]memSlot, []int, []int) {
	var index map[string]int // key -> slot index, for large batches only
	if n > 16 {
		index = make(map[string]int, n)
	}
	for i := range n {
		k := key(i)
		j := findMemSlot(slots, index, k)
		if j < 0 {
			j = len(slots)
			sh := int(maphash.String(s.seed, k) & s.mask)
			slots = append(slots, memSlot{key: k, shard: sh})
			if index != nil {
				index[k] = j
			}
			locks = insertShard(locks, sh)
		}
		slotOf = append(slotOf, j)
	}
	return slots, slotOf, locks
}

// lock and unlock take and release the shards' locks, in ascending order.
func (s *Store) lock(locks []int) {
	for _, sh := range locks {
		s.shards[sh].mu.Lock()
	}
}

func (s *Store) unlock(locks []int) {
	for k := len(locks) - 1; k >= 0; k-- {
		s.shards[locks[k]].mu.Unlock()
	}
}

// Settle applies the settlements as one atomic step at the store's current
// time, each refund to what its reservation charged at its ReservedAt on
// the same clock (see Settler), unless id was settled within SettleWindow. Like
// Decide, it fails with ErrInvalid for a malformed call and ErrUnavailable
// when ctx is done or the store is closed, and otherwise never blocks.
func (s *Store) Settle(ctx context.Context, id string, items []ratelimit.Settlement) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("%w: %w", ratelimit.ErrUnavailable, err)
	}
	if s.closed.Load() {
		return false, fmt.Errorf("%w: memory store closed", ratelimit.ErrUnavailable)
	}
	if err := ratelimit.ValidateSettle(id, items); err != nil {
		return false, err
	}
	var slotBuf [4]memSlot
	var ofBuf, lockBuf [8]int
	slots, slotOf, locks := s.slots(len(items), func(i int) string { return items[i].Item.Key }, slotBuf[:0], ofBuf[:0], lockBuf[:0])
	s.lock(locks)
	defer s.unlock(locks)

	if !slices.ContainsFunc(items, func(st ratelimit.Settlement) bool { return st.Delta != 0 }) {
		return false, nil // nothing to apply, and the id stays free
	}
	now := s.now().UnixMicro()
	if !s.mark(id, now) {
		return false, nil
	}
	s.load(slots, now)
	for i := range items {
		st := &items[i]
		if st.Delta == 0 {
			continue
		}
		sl := &slots[slotOf[i]]
		alg := st.Item.Algorithm
		next, ttl, changed := ratelimit.Settle(alg, sl.state(alg), now, st.ReservedAt, st.Delta, st.Item.Limit)
		if !changed {
			continue
		}
		sl.dirty, sl.ttl, sl.alg = true, ttl, alg
		sl.st, sl.has = next, ttl > 0
	}
	s.commit(slots, now)
	return true, nil
}

// mark records id as settled at now and reports whether it was new (not
// settled within SettleWindow). It sweeps forgotten ids whenever the set
// has doubled since its last sweep.
func (s *Store) mark(id string, now int64) bool {
	s.markMu.Lock()
	defer s.markMu.Unlock()
	if until, ok := s.settled[id]; ok && until > now {
		return false
	}
	s.settled[id] = now + ratelimit.SettleWindow.Microseconds()
	if len(s.settled) >= s.markAt {
		for k, until := range s.settled {
			if until <= now {
				delete(s.settled, k)
			}
		}
		s.markAt = max(2*len(s.settled), memMinSweep)
	}
	return true
}

// step applies one item to its slot, taking its cost when it fits, and
// returns the item's result.
func (s *Store) step(sl *memSlot, it *ratelimit.Item, now int64) ratelimit.Result {
	var next ratelimit.State
	var r ratelimit.Result
	var ttl time.Duration
	if it.Algorithm == ratelimit.Concurrency {
		next, r, ttl = ratelimit.ApplySlots(sl.state(it.Algorithm), now, it.Holder, it.Cost, it.Limit, true)
	} else {
		next, r, ttl = ratelimit.Apply(it.Algorithm, sl.state(it.Algorithm), now, it.Cost, it.Limit, true)
	}
	if r.Allowed && it.Cost > 0 {
		sl.st, sl.has, sl.alg, sl.dirty, sl.ttl = next, true, it.Algorithm, true, ttl
	}
	return r
}

// state returns the slot's state for alg, nil when the key is absent or
// holds another algorithm's state.
func (sl *memSlot) state(alg ratelimit.Algorithm) *ratelimit.State {
	if sl.has && sl.alg == alg {
		return &sl.st
	}
	return nil
}

// load fills the slots from the map. The caller holds their shards' locks.
func (s *Store) load(slots []memSlot, now int64) {
	for k := range slots {
		sl := &slots[k]
		e, ok := s.shards[sl.shard].keys[sl.key]
		sl.found, sl.dirty = ok, false
		sl.has = ok && e.expires > now
		sl.expired = ok && !sl.has
		if sl.has {
			sl.alg, sl.st = e.alg, e.st
		} else {
			sl.alg, sl.st = 0, ratelimit.State{}
		}
	}
}

// commit writes the dirty slots back and removes expired entries the batch
// found. The caller holds the slots' shards' locks.
func (s *Store) commit(slots []memSlot, now int64) {
	for k := range slots {
		sl := &slots[k]
		sh := &s.shards[sl.shard]
		switch {
		case sl.dirty && sl.ttl > 0:
			sh.keys[sl.key] = memEntry{alg: sl.alg, expires: now + sl.ttl.Microseconds(), st: sl.st}
			if !sl.found && len(sh.keys) >= sh.sweepAt {
				sh.sweep(now)
			}
		case sl.dirty || sl.expired:
			delete(sh.keys, sl.key)
		}
	}
}

// sweep removes every expired entry of the shard and sets the size of the
// next sweep to twice what is left, so that sweeping costs O(1) per
// inserted key. The caller holds sh.mu.
func (sh *memShard) sweep(now int64) {
	for k, e := range sh.keys {
		if e.expires <= now {
			delete(sh.keys, k)
		}
	}
	sh.sweepAt = max(2*len(sh.keys), memMinSweep)
}

// Release frees the slots of items (see SlotStore). It fails only for
// invalid items, a done ctx or a closed store.
func (s *Store) Release(ctx context.Context, items []ratelimit.Item) error {
	return s.eachSlot(ctx, items, nil, func(st ratelimit.State, held bool, i int, _ int64) (ratelimit.State, bool) {
		if !held {
			return st, false
		}
		return ratelimit.ReleaseSlot(&st, items[i].Holder), true
	})
}

// Renew extends the slots of items to Limit.Per from now, taking back
// those no longer held while their key has room, and returns the indexes
// of the items whose slot was lost (see SlotStore). It fails only as
// Release does, and then reports none lost.
func (s *Store) Renew(ctx context.Context, items []ratelimit.Item) ([]int, error) {
	r, err := s.renew(ctx, items, true)
	return r.Lost, err
}

// RenewReport is Renew, reporting the slots taken back too (see
// RenewReporter).
func (s *Store) RenewReport(ctx context.Context, items []ratelimit.Item) (ratelimit.Renewal, error) {
	return s.renew(ctx, items, true)
}

// RenewHeld renews the slots of items that s still holds, as Renew does,
// but never takes one back: a slot no longer held is lost, room or not (for
// the local shares of a stack.Stack, which renew slots held in its backend as
// well). Lost lists, in increasing order, every item not renewed.
func (s *Store) RenewHeld(ctx context.Context, items []ratelimit.Item) (ratelimit.Renewal, error) {
	return s.renew(ctx, items, false)
}

// renew is RenewReport; without retake a slot no longer held is lost,
// room or not (for the local shares of a stack.Stack, which renew slots held in
// its backend as well).
func (s *Store) renew(ctx context.Context, items []ratelimit.Item, retake bool) (ratelimit.Renewal, error) {
	var r ratelimit.Renewal
	err := s.eachSlot(ctx, items, &r.Lost, func(st ratelimit.State, held bool, k int, now int64) (ratelimit.State, bool) {
		it := &items[k]
		live := ratelimit.LiveHolds(&st, now)
		exp := now + it.Limit.Per.Microseconds()
		if i := slices.IndexFunc(live, func(h ratelimit.Hold) bool { return h.Holder == it.Holder }); i >= 0 {
			live = slices.Clone(live)
			live[i].Expires = exp
		} else if !retake || int64(len(live)) >= it.Limit.Max {
			return st, false
		} else {
			live = append(slices.Clip(live), ratelimit.Hold{Holder: it.Holder, Expires: exp})
			r.Retaken = append(r.Retaken, k)
		}
		return ratelimit.State{Per: it.Limit.Per.Microseconds(), Holds: live}, true
	})
	if err != nil {
		return ratelimit.Renewal{}, err
	}
	return r, nil
}

// eachSlot replaces the concurrency state of each item's key by f's, under
// its shard's lock, and then sets the key's expiry from its holds
// (removing it when none is left). f gets the state by value (so that the
// entry never escapes to the heap) and held, false when the key is absent
// or expired (the state is then empty), and the item's index; a key of
// another algorithm is
// left alone. When missed is not nil, it appends to it the indexes of the
// items whose key held another algorithm or for which f returned false
// (their key is left as it was).
func (s *Store) eachSlot(ctx context.Context, items []ratelimit.Item, missed *[]int, f func(st ratelimit.State, held bool, i int, now int64) (ratelimit.State, bool)) error {
	if err := ratelimit.CheckSlotItems(items); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", ratelimit.ErrUnavailable, err)
	}
	if s.closed.Load() {
		return fmt.Errorf("%w: memory store closed", ratelimit.ErrUnavailable)
	}
	for i := range items {
		it := &items[i]
		sh := &s.shards[maphash.String(s.seed, it.Key)&s.mask]
		sh.mu.Lock()
		now := s.now().UnixMicro()
		e, found := sh.keys[it.Key]
		held := found && e.expires > now
		ok := !held || e.alg == ratelimit.Concurrency
		if ok {
			if !held {
				e = memEntry{alg: ratelimit.Concurrency}
			}
			e.st, ok = f(e.st, held, i, now)
		}
		if ok {
			live := ratelimit.LiveHolds(&e.st, now)
			if _, last := ratelimit.HoldSpan(live); len(live) > 0 {
				e.st.Holds, e.expires = live, now+ratelimit.TTLMillis(last-now).Microseconds()
				sh.keys[it.Key] = e
				if !found && len(sh.keys) >= sh.sweepAt {
					sh.sweep(now)
				}
			} else {
				delete(sh.keys, it.Key)
			}
		}
		sh.mu.Unlock()
		if !ok && missed != nil {
			*missed = append(*missed, i)
		}
	}
	return nil
}

// Len returns the number of live (unexpired) keys, removing the expired
// ones it finds. It takes every shard's lock in turn, so it costs time
// proportional to the number of keys.
func (s *Store) Len() int {
	now := s.now().UnixMicro()
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.sweep(now)
		n += len(sh.keys)
		sh.mu.Unlock()
	}
	return n
}

// Close drops every key. Decide afterwards fails with ErrUnavailable.
// Close always returns nil.
func (s *Store) Close() error {
	s.closed.Store(true)
	s.markMu.Lock()
	clear(s.settled)
	s.markMu.Unlock()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		clear(sh.keys)
		sh.mu.Unlock()
	}
	return nil
}

// anyDirty reports whether a slot holds a cost taken in this batch.
func anyDirty(slots []memSlot) bool {
	for k := range slots {
		if slots[k].dirty {
			return true
		}
	}
	return false
}

// findMemSlot returns the index of key's memSlot, or -1.
func findMemSlot(slots []memSlot, index map[string]int, key string) int {
	if index != nil {
		if j, ok := index[key]; ok {
			return j
		}
		return -1
	}
	for j := range slots {
		if slots[j].key == key {
			return j
		}
	}
	return -1
}

// insertShard adds v to the ascending set xs.
func insertShard(xs []int, v int) []int {
	i := 0
	for i < len(xs) && xs[i] < v {
		i++
	}
	if i < len(xs) && xs[i] == v {
		return xs
	}
	xs = append(xs, 0)
	copy(xs[i+1:], xs[i:])
	xs[i] = v
	return xs
}
