package local

import (
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// DefaultMaxLimiters is the cap on live limiters of a Set whose
// Options.MaxLimiters is 0.
const DefaultMaxLimiters = 1_000_000

// defaultShards is the shard count of a Set whose Options.Shards is 0.
const defaultShards = 64

// Eviction scans a bounded number of limiters per insert, so that Allow stays
// O(1) amortized.
const (
	// sweepBelowCap is how many full limiters an insert removes from the
	// least recently used end of its shard while the set is below its cap.
	sweepBelowCap = 2
	// scanAtCap is how many limiters an insert examines, in each of at most
	// two shards, when the set is at its cap.
	scanAtCap = 16
)

// Options configures a Set.
type Options struct {
	// Rate is the refill rate in tokens per second. rate.Inf admits
	// everything and keeps no state. 0 (or less) never refills: a caller
	// gets Burst tokens once.
	Rate rate.Limit
	// Burst is the bucket capacity in tokens, and what a caller seen for the
	// first time starts with. 0 (or less) admits nothing but cost 0.
	Burst int
	// MaxLimiters caps the number of live limiters (memory). 0 means
	// DefaultMaxLimiters.
	MaxLimiters int
	// Shards is the number of independently locked maps, rounded up to a
	// power of two and capped at MaxLimiters. 0 means 64.
	Shards int
}

// Set is a set of token buckets, one per key (caller), all with the same
// rate and burst, held in this process only. It is the coarse first stage of
// a decision; it never replaces the fleet-wide store.
//
// Memory is bounded by MaxLimiters. A limiter is evicted only once it is full
// again at the time of the call that evicts it, so a caller whose limiter is
// dropped and recreated gets exactly the burst it would have had anyway:
// eviction never hands out capacity early. When the set is at its cap and no
// limiter is full, a caller without a limiter is checked against one shared
// overflow limiter of the same rate and burst instead of getting a new one,
// so a spray of distinct keys can neither grow memory nor collect fresh
// bursts beyond that one bucket (see Overflowed). Two limits of this:
// eviction examines a bounded number of the least recently used limiters per
// insert (16 in each of two shards at the cap), so a full limiter deeper in
// the list may be missed and a caller overflowed meanwhile; and a caller who
// spent from the overflow limiter gets a full bucket of its own once a slot
// frees, as any new caller does.
//
// Time is passed in by the caller and never read from the clock. Time never
// goes backwards inside the set: an instant earlier than the latest one seen
// by the key's shard is treated as that latest one, so a clock step back
// creates no capacity (and no panic). The clamp is per shard rather than per
// key so that a limiter evicted as full at some instant cannot come back at
// an earlier one; concurrent callers' instants differ by microseconds, which
// is all the clamp can add.
//
// A Set is safe for concurrent use. Its zero value is not usable; use
// New.
type Set struct {
	limit   rate.Limit
	burst   int
	max     int64
	seed    maphash.Seed
	mask    uint64
	shards  []localShard
	live    atomic.Int64  // limiters in all shards
	victim  atomic.Uint64 // round robin over shards to steal from at the cap
	spilled atomic.Uint64 // calls answered by the overflow limiter

	overflowMu sync.Mutex
	overflowHW int64 // latest instant seen by overflow, Unix ns
	overflow   *localEntry
}

// localShard is one map of limiters with its own lock and its own list in
// least recently used order.
type localShard struct {
	mu sync.Mutex
	hw int64 // latest instant seen, Unix ns
	// quiet is the instant (Unix ns) before which a scan at the cap is known
	// to find nothing evictable; MinInt64 when unknown.
	quiet int64
	m     map[string]*localEntry
	// head is the least recently used limiter, tail the most recent; the
	// list is circular through a sentinel so that unlinking needs no checks.
	lru localEntry
	_   [48]byte // keep shards on separate cache lines
}

// localEntry is one caller's limiter.
type localEntry struct {
	key        string
	lim        *rate.Limiter
	prev, next *localEntry
}

// New returns an empty set configured by o.
func New(o Options) *Set {
	maxLim := o.MaxLimiters
	if maxLim <= 0 {
		maxLim = DefaultMaxLimiters
	}
	n := o.Shards
	if n <= 0 {
		n = defaultShards
	}
	n = min(n, maxLim, 1<<16)
	shards := 1
	for shards < n {
		shards <<= 1
	}
	s := &Set{
		limit:    o.Rate,
		burst:    o.Burst,
		max:      int64(maxLim),
		seed:     maphash.MakeSeed(),
		mask:     uint64(shards - 1),
		shards:   make([]localShard, shards),
		overflow: &localEntry{lim: rate.NewLimiter(o.Rate, o.Burst)},
	}
	s.overflowHW = math.MinInt64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.m = make(map[string]*localEntry)
		sh.hw = math.MinInt64
		sh.quiet = math.MinInt64
		sh.lru.prev, sh.lru.next = &sh.lru, &sh.lru
	}
	return s
}

// Limit returns the set's rate in tokens per second and its burst.
func (s *Set) Limit() (rate.Limit, int) { return s.limit, s.burst }

// Len returns the number of live limiters. It never exceeds MaxLimiters.
func (s *Set) Len() int { return int(s.live.Load()) }

// Overflowed returns how many calls were decided by the shared overflow
// limiter because the set was at its cap and no limiter could be evicted.
func (s *Set) Overflowed() uint64 { return s.spilled.Load() }

// Allow takes cost tokens from key's bucket at instant now if they are all
// available, and reports whether it did.
//
// remaining is the whole number of tokens left after the call, in
// [0, Burst]. On denial nothing is taken and retryAfter is the exact time
// until cost tokens exist: the smallest whole number of nanoseconds after
// which the limiter holds cost tokens, so the same call at now+retryAfter is
// allowed (100ms for one token at 10/s, not 99.999999ms). retryAfter is
// rate.InfDuration when cost can never fit (cost above Burst, or no refill);
// it is 0 when ok.
//
// A cost of 0 (or less) takes nothing, always allows and reports the
// remaining tokens; it creates no limiter. now is used at nanosecond
// precision as Unix time, so it must lie between the years 1678 and 2262;
// its monotonic clock reading is ignored.
func (s *Set) Allow(key string, now time.Time, cost int) (ok bool, remaining int, retryAfter time.Duration) {
	if s.limit == rate.Inf {
		return true, max(s.burst, 0), 0
	}
	cost = max(cost, 0)
	if cost > s.burst {
		return false, s.peek(key, now), rate.InfDuration
	}
	sh := &s.shards[maphash.String(s.seed, key)&s.mask]
	sh.mu.Lock()
	nowNs := sh.advance(now)
	e := sh.m[key]
	if e != nil {
		sh.touch(e)
		ok, remaining, retryAfter = s.take(e, nowNs, cost)
		sh.mu.Unlock()
		return ok, remaining, retryAfter
	}
	if cost == 0 {
		sh.mu.Unlock()
		return true, max(s.burst, 0), 0
	}
	e = s.insert(sh, key, nowNs)
	if e != nil {
		ok, remaining, retryAfter = s.take(e, nowNs, cost)
		sh.mu.Unlock()
		return ok, remaining, retryAfter
	}
	sh.mu.Unlock()
	s.spilled.Add(1)
	s.overflowMu.Lock()
	s.overflowHW = max(s.overflowHW, nowNs)
	ok, remaining, retryAfter = s.take(s.overflow, s.overflowHW, cost)
	s.overflowMu.Unlock()
	return ok, remaining, retryAfter
}

// peek returns key's whole remaining tokens at now without changing anything.
func (s *Set) peek(key string, now time.Time) int {
	sh := &s.shards[maphash.String(s.seed, key)&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[key]
	if e == nil {
		return max(s.burst, 0)
	}
	return wholeTokens(e.lim.TokensAt(time.Unix(0, max(now.UnixNano(), sh.hw))), s.burst)
}

// take applies a call of cost tokens at nowNs (already clamped) to e, whose
// lock (the shard's, or the overflow's) is held.
func (s *Set) take(e *localEntry, nowNs int64, cost int) (bool, int, time.Duration) {
	t := time.Unix(0, nowNs)
	if e.lim.AllowN(t, cost) {
		return true, wholeTokens(e.lim.TokensAt(t), s.burst), 0
	}
	have := e.lim.TokensAt(t)
	return false, wholeTokens(have, s.burst), s.retryAfter(e.lim, t, have, cost)
}

// retryAfter returns the smallest d, to the nanosecond, such that lim holds
// cost tokens at t+d by the limiter's own arithmetic, so that a call after
// exactly d is allowed whatever rounding the float conversion did.
func (s *Set) retryAfter(lim *rate.Limiter, t time.Time, have float64, cost int) time.Duration {
	if s.limit <= 0 {
		return rate.InfDuration
	}
	need := float64(cost)
	est := (need - have) / float64(s.limit) * float64(time.Second)
	if est >= float64(math.MaxInt64/2) {
		return rate.InfDuration
	}
	// The limiter itself admits a call up to a nanosecond's worth of tokens
	// early (it truncates the wait); the answer here is when the tokens
	// actually exist, which the limiter then always admits.
	fits := func(d time.Duration) bool { return lim.TokensAt(t.Add(d)) >= need }
	// Bracket the answer around the estimate, then bisect to the nanosecond.
	hi := time.Duration(math.Ceil(est))
	step := time.Duration(1)
	for !fits(hi) {
		if hi > math.MaxInt64/4 {
			return rate.InfDuration
		}
		hi += step
		step *= 2
	}
	lo := hi - 1 // invariant: fits(hi); lo is the candidate below
	step = 1
	for lo >= 0 && fits(lo) {
		hi = lo
		lo -= step
		step *= 2
	}
	lo = max(lo, -1)
	for hi-lo > 1 { // fits(hi), !fits(lo) (or lo == -1)
		mid := lo + (hi-lo)/2
		if fits(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// wholeTokens converts a token count to the whole tokens in [0, burst].
func wholeTokens(tokens float64, burst int) int {
	if tokens <= 0 || math.IsNaN(tokens) {
		return 0
	}
	return min(int(tokens), max(burst, 0))
}

// insert creates key's limiter in sh (locked) at nowNs and returns it, or nil
// when the set is at its cap and nothing could be evicted.
func (s *Set) insert(sh *localShard, key string, nowNs int64) *localEntry {
	now := time.Unix(0, nowNs)
	if nowNs >= sh.quiet {
		sh.sweep(now, sweepBelowCap, true, s)
	}
	if !s.reserve() {
		if nowNs >= sh.quiet {
			sh.sweep(now, scanAtCap, false, s)
		}
		if !s.reserve() {
			s.stealOne(sh, now)
			if !s.reserve() {
				return nil
			}
		}
	}
	e := &localEntry{key: key, lim: rate.NewLimiter(s.limit, s.burst)}
	sh.m[key] = e
	sh.pushBack(e)
	return e
}

// reserve counts one more live limiter if the set is below its cap.
func (s *Set) reserve() bool {
	for {
		n := s.live.Load()
		if n >= s.max {
			return false
		}
		if s.live.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// stealOne tries to free a slot in another shard than own (locked), without
// waiting for that shard's lock.
func (s *Set) stealOne(own *localShard, now time.Time) {
	if len(s.shards) == 1 {
		return
	}
	other := &s.shards[s.victim.Add(1)&s.mask]
	if other == own || !other.mu.TryLock() {
		return
	}
	if t := other.advance(now); t >= other.quiet {
		other.sweep(time.Unix(0, t), scanAtCap, false, s)
	}
	other.mu.Unlock()
}

// sweep examines up to n limiters of sh (locked) from its least recently used
// end and evicts those that are full at now. With stopAtBusy it stops at the
// first limiter that is not full; otherwise it skips over it, and when it
// evicts nothing it marks sh quiet until the first examined limiter can be
// full, so that a spray of new callers at the cap does not rescan the same
// limiters on every call.
func (sh *localShard) sweep(now time.Time, n int, stopAtBusy bool, s *Set) {
	burst := float64(s.burst)
	quiet := int64(math.MaxInt64)
	evicted := false
	e := sh.lru.next
	for i := 0; i < n && e != &sh.lru; i++ {
		next := e.next
		// The shard's time never goes back and tokens only grow between
		// calls, so a limiter full at now would still be full at the key's
		// next call: a new limiter then starts exactly where this one stands.
		tokens := e.lim.TokensAt(now)
		if tokens >= burst {
			sh.unlink(e)
			delete(sh.m, e.key)
			s.live.Add(-1)
			evicted = true
		} else if stopAtBusy {
			return
		} else {
			quiet = min(quiet, fullAt(now, burst-tokens, s.limit))
		}
		e = next
	}
	if !stopAtBusy && !evicted {
		sh.quiet = quiet
	}
}

// fullAt returns the instant, in Unix ns, at which a limiter of rate r
// missing deficit tokens at now is full again, rounded early (a scan that
// comes too early finds nothing; one skipped too long would overflow callers).
func fullAt(now time.Time, deficit float64, r rate.Limit) int64 {
	if r <= 0 {
		return math.MaxInt64
	}
	wait := math.Floor(deficit/float64(r)*float64(time.Second)) - 1
	t := now.UnixNano()
	if wait >= float64(math.MaxInt64-t) {
		return math.MaxInt64
	}
	return t + int64(wait)
}

// advance moves sh's (locked) clock to now unless now is earlier, and returns
// the instant to decide at, in Unix ns.
func (sh *localShard) advance(now time.Time) int64 {
	sh.hw = max(sh.hw, now.UnixNano())
	return sh.hw
}

// pushBack appends e as the most recently used limiter of sh. A change of
// the list ends a quiet period: other limiters may now be first in line.
func (sh *localShard) pushBack(e *localEntry) {
	e.prev, e.next = sh.lru.prev, &sh.lru
	sh.lru.prev.next = e
	sh.lru.prev = e
	sh.quiet = math.MinInt64
}

func (sh *localShard) unlink(e *localEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

// touch marks e as the most recently used limiter of sh.
func (sh *localShard) touch(e *localEntry) {
	if sh.lru.prev == e {
		return
	}
	sh.unlink(e)
	sh.pushBack(e)
}
