package lease

import (
	"errors"
	"math"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

// TestAutoRateObserve steps one key's demand estimate through fixed
// instants: it engages at 4 requests' cost within a TTL, decays by
// e^(−Δt/TTL), releases below 2, and a clock that goes backwards decays
// nothing.
func TestAutoRateObserve(t *testing.T) {
	const ttl = time.Second
	t0 := time.Unix(1_700_000_000, 0)
	var a autoRate
	steps := []struct {
		at      time.Duration
		cost    int64
		e       float64 // rate × TTL after the step
		engaged bool
	}{
		{0, 1, 1, false},
		{0, 1, 2, false},
		{0, 1, 3, false},
		{0, 1, 4, true},                     // 4 costs: engaged
		{ttl, 1, 4*math.Exp(-1) + 1, true},  // 2.47: stays engaged above 2
		{-ttl, 1, 4*math.Exp(-1) + 2, true}, // backwards: no decay
		{3 * ttl, 1, (4*math.Exp(-1)+2)*math.Exp(-2) + 1, false}, // 1.47 < 2: released
		{3 * ttl, 2, (4*math.Exp(-1)+2)*math.Exp(-2) + 3, false}, // 3.47: below 4 costs of 2 (8)
	}
	for i, st := range steps {
		a.observe(t0.Add(st.at), st.cost, ttl)
		if e := a.rate * ttl.Seconds(); math.Abs(e-st.e) > 1e-9 || a.engaged != st.engaged {
			t.Fatalf("step %d: E = %.6f engaged %v, want %.6f %v", i, e, a.engaged, st.e, st.engaged)
		}
	}
}

// TestAutoTableAdmitsByHeat: keys asked once (a spray of distinct
// callers) do not enter the auto table; keys asked twice fill it up to its
// bound and no further; a hot key then still enters it in place of a
// colder one and engages within a few decisions, and more spray does not
// push it out. All at one instant, so that nothing decays.
func TestAutoTableAdmitsByHeat(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := New(nil, Options{Now: func() time.Time { return now }, SweepEvery: -1, AutoKeys: 64})
	bound := s.autoCap * len(s.shards)
	if bound < 64 || bound >= 64+len(s.shards) {
		t.Fatalf("bound %d for AutoKeys 64 over %d shards", bound, len(s.shards))
	}
	it := ratelimit.Item{Algorithm: ratelimit.TokenBucket, Limit: ratelimit.Limit{Rate: 10, Per: time.Second, Burst: 10}, Cost: 1,
		Lease: ratelimit.Lease{Auto: true, TTL: time.Second}}
	spray := func(name string, n, times int) {
		for i := range n {
			it.Key = name + strconv.Itoa(i)
			for range times {
				if _, ok := s.autoLeased(it, now); ok {
					t.Fatalf("spray key %s leased", it.Key)
				}
			}
		}
	}

	spray("once", 2000, 1)
	// An estimate reaches 2 requests only when all four cells of a key
	// collide: with 250 keys a shard over 2,048 cells a row, for about
	// 0.02% of them.
	if n := autoLen(t, s); n >= 20 {
		t.Fatalf("2000 keys asked once: %d tracked, want almost none", n)
	}
	spray("twice", 2000, 2)
	if n := autoLen(t, s); n != bound {
		t.Fatalf("after keys asked twice: %d tracked, want the bound %d", n, bound)
	}

	it.Key = "hot"
	engagedAt := 0
	for i := 1; i <= 10; i++ {
		if _, ok := s.autoLeased(it, now); ok && engagedAt == 0 {
			engagedAt = i
		}
	}
	if engagedAt == 0 || engagedAt > 6 || !autoTracked(s, "hot") {
		t.Fatalf("hot key in a full table: engaged at decision %d (0: never), tracked %v; want by the 6th, true",
			engagedAt, autoTracked(s, "hot"))
	}
	spray("more", 2000, 2)
	if n := autoLen(t, s); n != bound || !autoTracked(s, "hot") {
		t.Fatalf("after more spray: %d tracked (want %d), hot tracked %v", n, bound, autoTracked(s, "hot"))
	}
	if st := s.Stats(); st.AutoKeys != int64(bound) || st.AutoEvicted == 0 {
		t.Fatalf("stats %+v: want %d keys and evictions", st, bound)
	}
}

// TestHeatSketchDecays steps one cell's key through fixed instants: the
// estimate adds each cost, decays by e^(−Δt/TTL), and a clock that goes
// backwards decays nothing.
func TestHeatSketchDecays(t *testing.T) {
	const ttl = time.Second
	t0 := time.Unix(1_700_000_000, 0)
	k := newHeatSketch(64)
	steps := []struct {
		at   time.Duration
		cost int64
		est  float64
	}{
		{0, 1, 1},
		{0, 2, 3},
		{ttl, 1, 3*math.Exp(-1) + 1},
		{-ttl, 1, 3*math.Exp(-1) + 2},
		{3 * ttl, 1, (3*math.Exp(-1)+2)*math.Exp(-2) + 1},
	}
	for i, st := range steps {
		if est := k.add(12345, t0.Add(st.at), st.cost, ttl); math.Abs(est-st.est) > 1e-9 {
			t.Fatalf("step %d: estimate %.6f, want %.6f", i, est, st.est)
		}
	}
	if est := k.add(999<<32, t0, 1, ttl); est != 1 {
		t.Fatalf("another key's first estimate %v, want 1", est)
	}
}

// autoLen is the number of keys in the auto tables of s, counted in every
// shard; it fails the test when the store's own count disagrees.
func autoLen(t testing.TB, s *Store) int {
	t.Helper()
	n := 0
	for i := range s.shards {
		s.shards[i].mu.Lock()
		n += len(s.shards[i].auto)
		s.shards[i].mu.Unlock()
	}
	if c := s.autoKeys.Load(); c != int64(n) {
		t.Fatalf("the auto tables count %d keys, hold %d", c, n)
	}
	return n
}

// autoTracked reports whether the auto tables of s hold key.
func autoTracked(s *Store, key string) bool {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.auto[key] != nil
}

// BenchmarkAutoLeasedColdKeys is what an auto lease adds to a decision of
// a cold key (which then goes to the store unleased), from parallel
// callers: a caller spraying distinct keys, each asked once per TTL (the
// decisions' clock advances TTL/keys per decision). 4,000 keys a TTL stay
// below the heat sketch's width: they take no entry and no allocation;
// 100,000 a TTL fill its cells, so that keys pass for warm and take the
// place of colder ones in the full table.
func BenchmarkAutoLeasedColdKeys(b *testing.B) {
	for _, n := range []int{4_000, 100_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			t0 := time.Unix(1_700_000_000, 0)
			s := New(nil, Options{Now: func() time.Time { return t0 }, SweepEvery: -1})
			keys := make([]string, n)
			for i := range keys {
				keys[i] = "qg:{t:" + strconv.Itoa(i) + "}:tenant:tb"
			}
			step := time.Second / time.Duration(n)
			var seq atomic.Uint64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				it := ratelimit.Item{Algorithm: ratelimit.TokenBucket, Limit: ratelimit.Limit{Rate: 10, Per: time.Second, Burst: 10}, Cost: 1,
					Lease: ratelimit.Lease{Auto: true, TTL: time.Second}}
				for pb.Next() {
					// A stride through the keys: each is seen once per n
					// decisions, that is once per TTL.
					k := seq.Add(1)
					it.Key = keys[k*7919%uint64(n)]
					s.autoLeased(it, t0.Add(time.Duration(k)*step))
				}
			})
		})
	}
}

// TestAutoLeasedUnregistersOnInvalidBatch: a leased Auto item registers
// with its block as its decision is recorded; when another item of the
// batch then fails validation, the registration is undone, so that the
// block can still be forgotten once idle.
func TestAutoLeasedUnregistersOnInvalidBatch(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := New(nil, Options{Now: func() time.Time { return now }, SweepEvery: -1})
	it := ratelimit.Item{Key: "k", Algorithm: ratelimit.TokenBucket, Limit: ratelimit.Limit{Rate: 10, Per: time.Second, Burst: 10}, Cost: 1,
		Lease: ratelimit.Lease{Auto: true, TTL: time.Second}}
	engaged := false
	for range autoEngage + 2 {
		idx, plans, err := s.leasedItems([]ratelimit.Item{it})
		if err != nil {
			t.Fatal(err)
		}
		if len(idx) > 0 {
			engaged = true
			unregister(idx, plans)
		}
	}
	if !engaged {
		t.Fatal("the key never engaged")
	}
	bad := ratelimit.Item{Algorithm: ratelimit.TokenBucket, Limit: it.Limit} // no key
	if _, _, err := s.leasedItems([]ratelimit.Item{it, bad}); !errors.Is(err, ratelimit.ErrInvalid) {
		t.Fatalf("batch with an item without a key: %v, want ErrInvalid", err)
	}
	sh := s.shard("k")
	sh.mu.Lock()
	b := sh.blocks["k"]
	sh.mu.Unlock()
	if b == nil {
		t.Fatal("no block for the engaged key")
	}
	b.mu.Lock()
	users := b.users
	b.mu.Unlock()
	if users != 0 {
		t.Errorf("block users after the failed batch: %d, want 0", users)
	}
}

// TestAutoKeysLargest: the largest AutoKeys bounds each shard's table by a
// positive share (a rounding that overflowed would make every table full
// and keep every key untracked).
func TestAutoKeysLargest(t *testing.T) {
	s := New(nil, Options{SweepEvery: -1, AutoKeys: math.MaxInt})
	if s.autoCap <= 0 {
		t.Fatalf("autoCap %d for AutoKeys MaxInt, want positive", s.autoCap)
	}
	s = New(nil, Options{SweepEvery: -1, AutoKeys: 1})
	if s.autoCap != 1 {
		t.Fatalf("autoCap %d for AutoKeys 1, want 1", s.autoCap)
	}
}
