package ratelimit

import (
	"math"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
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

// TestAutoTableBounded: the tracked keys are at most autoMaxKeys; a new
// key seen while the table is full is not tracked (not leased) until the
// keys that went quiet are pruned.
func TestAutoTableBounded(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := NewLeaseStore(nil, LeaseOptions{Now: func() time.Time { return now }, SweepEvery: -1})
	it := Item{Key: "k", Algorithm: TokenBucket, Limit: Limit{Rate: 10, Per: time.Second, Burst: 10}, Cost: 1,
		Lease: Lease{Auto: true, TTL: time.Second}}
	for i := range autoMaxKeys {
		it.Key = "k" + strconv.Itoa(i)
		s.autoLeased(it, now)
	}
	it.Key = "new"
	for range 5 {
		s.autoLeased(it, now)
	}
	if n := autoLen(t, s); n != autoMaxKeys || autoTracked(s, "new") {
		t.Fatalf("full table: %d keys, new tracked %v; want %d, false", n, autoTracked(s, "new"), autoMaxKeys)
	}
	now = now.Add(2 * time.Second)
	s.autoLeased(it, now)
	if n := autoLen(t, s); n != 1 || !autoTracked(s, "new") {
		t.Fatalf("after two quiet TTLs: %d keys, new tracked %v; want 1, true", n, autoTracked(s, "new"))
	}
}

// autoLen is the number of keys in the auto tables of s, counted in every
// shard; it fails the test when the store's own count disagrees.
func autoLen(t testing.TB, s *LeaseStore) int {
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
func autoTracked(s *LeaseStore, key string) bool {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.auto[key] != nil
}

// BenchmarkAutoLeasedColdKeys is what an auto lease adds to a decision of
// a cold key (which then goes to the store unleased): one estimate
// update under its shard's lock, over 100,000 keys, from parallel callers.
func BenchmarkAutoLeasedColdKeys(b *testing.B) {
	now := time.Unix(1_700_000_000, 0)
	s := NewLeaseStore(nil, LeaseOptions{Now: func() time.Time { return now }, SweepEvery: -1})
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = "qg:{t:" + strconv.Itoa(i) + "}:tenant:tb"
	}
	var seq atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		it := Item{Algorithm: TokenBucket, Limit: Limit{Rate: 10, Per: time.Second, Burst: 10}, Cost: 1,
			Lease: Lease{Auto: true, TTL: time.Second}}
		for pb.Next() {
			// A stride through the keys: each is seen once per 100,000
			// decisions, far below the engagement threshold.
			it.Key = keys[seq.Add(7919)%uint64(len(keys))]
			s.autoLeased(it, now)
		}
	})
}
