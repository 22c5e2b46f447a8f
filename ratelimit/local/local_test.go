package local

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"
	"pgregory.net/rapid"
)

var localT0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// localAt returns localT0 + k×100ms.
func localAt(k int) time.Time { return localT0.Add(time.Duration(k) * 100 * time.Millisecond) }

type localStep struct {
	key       string
	at        time.Time
	cost      int
	ok        bool
	remaining int
	retry     time.Duration
}

func runLocalSteps(t *testing.T, s *Set, steps []localStep) {
	t.Helper()
	for i, st := range steps {
		ok, rem, retry := s.Allow(st.key, st.at, st.cost)
		if ok != st.ok || rem != st.remaining || retry != st.retry {
			t.Fatalf("step %d: Allow(%q, t0+%v, %d) = (%v, %d, %v), want (%v, %d, %v)",
				i, st.key, st.at.Sub(localT0), st.cost, ok, rem, retry, st.ok, st.remaining, st.retry)
		}
	}
}

func TestLocalBurstThenDenial(t *testing.T) {
	s := New(Options{Rate: 10, Burst: 3})
	runLocalSteps(t, s, []localStep{
		{"a", localAt(0), 1, true, 2, 0},
		{"a", localAt(0), 1, true, 1, 0},
		{"a", localAt(0), 1, true, 0, 0},
		{"a", localAt(0), 1, false, 0, 100 * time.Millisecond},
		{"a", localAt(0), 2, false, 0, 200 * time.Millisecond},
		{"b", localAt(0), 3, true, 0, 0}, // another caller has its own bucket
		{"a", localAt(1), 1, true, 0, 0},
		{"a", localAt(1), 1, false, 0, 100 * time.Millisecond},
		{"a", localAt(3), 2, true, 0, 0},
		{"a", localAt(100), 0, true, 3, 0}, // cost 0 only looks
		{"a", localAt(100), 4, false, 3, rate.InfDuration},
		{"a", localAt(100), 3, true, 0, 0},
	})
}

func TestLocalRetryAfterIsExact(t *testing.T) {
	for _, tc := range []struct {
		rate  rate.Limit
		burst int
		cost  int
	}{
		{10, 3, 1}, {3, 5, 2}, {7, 7, 7}, {0.5, 2, 1}, {1000, 50, 13}, {1.0 / 3, 4, 3}, {123.456, 9, 4},
	} {
		t.Run(fmt.Sprintf("r=%v,b=%d,c=%d", tc.rate, tc.burst, tc.cost), func(t *testing.T) {
			s := New(Options{Rate: tc.rate, Burst: tc.burst})
			now := localAt(0)
			for i := 0; i < 20; i++ {
				ok, _, retry := s.Allow("k", now, tc.cost)
				if ok {
					if retry != 0 {
						t.Fatalf("allowed with retryAfter %v", retry)
					}
					now = now.Add(37 * time.Millisecond)
					continue
				}
				if retry <= 0 {
					t.Fatalf("denied with retryAfter %v", retry)
				}
				// Denials take nothing, so probing earlier instants first is safe.
				if retry >= time.Millisecond {
					if ok, _, _ := s.Allow("k", now.Add(retry-time.Millisecond), tc.cost); ok {
						t.Fatalf("allowed 1ms before retryAfter %v", retry)
					}
				}
				if ok, _, _ := s.Allow("k", now.Add(retry-time.Microsecond), tc.cost); ok {
					t.Fatalf("allowed 1µs before retryAfter %v", retry)
				}
				// Tokens exist at retry, not a nanosecond before.
				if have := s.peek("k", now.Add(retry)); have < tc.cost {
					t.Fatalf("%d tokens at retryAfter %v, want %d", have, retry, tc.cost)
				}
				if have := s.peek("k", now.Add(retry-1)); have >= tc.cost {
					t.Fatalf("%d tokens 1ns before retryAfter %v", have, retry)
				}
				now = now.Add(retry)
				if ok, _, _ := s.Allow("k", now, tc.cost); !ok {
					t.Fatalf("denied after waiting retryAfter %v", retry)
				}
			}
		})
	}
}

func TestLocalEvictsOnlyFullLimiters(t *testing.T) {
	// rate 10/s, burst 5: one token takes 100ms, a drained bucket 500ms.
	s := New(Options{Rate: 10, Burst: 5, MaxLimiters: 2, Shards: 1})
	runLocalSteps(t, s, []localStep{
		{"drained", localAt(0), 5, true, 0, 0},
		{"light", localAt(0), 1, true, 4, 0},
		// At 100ms "light" is full again, "drained" holds 1 token: the new
		// caller replaces "light", never "drained".
		{"new1", localAt(1), 1, true, 4, 0},
		{"drained", localAt(1), 2, false, 1, 100 * time.Millisecond},
		// At the cap with nothing full: a new caller goes to overflow.
		{"new2", localAt(1), 1, true, 4, 0},
		{"drained", localAt(1), 1, true, 0, 0},
		{"drained", localAt(1), 1, false, 0, 100 * time.Millisecond},
		// "light" comes back with a new, full limiter: exactly what it would
		// have had at 100ms anyway.
		{"light", localAt(2), 5, true, 0, 0}, // new1 is full at 200ms and evicted
		{"new3", localAt(2), 1, true, 4, 0},  // overflow: drained and light are not full
	})
	if got := s.Len(); got != 2 {
		t.Fatalf("Len = %d, want 2", got)
	}
	if got := s.Overflowed(); got != 2 {
		t.Fatalf("Overflowed = %d, want 2", got)
	}
}

func TestLocalDrainedCallerGetsNoFreshBurstAtCap(t *testing.T) {
	s := New(Options{Rate: 1, Burst: 10, MaxLimiters: 1, Shards: 1})
	if ok, _, _ := s.Allow("victim", localAt(0), 10); !ok {
		t.Fatal("first burst denied")
	}
	// A spray of new callers at the cap must neither evict the drained caller
	// nor refill it.
	for i := range 1000 {
		s.Allow(fmt.Sprintf("spray-%d", i), localAt(i/100), 1)
		if s.Len() != 1 {
			t.Fatalf("Len = %d after %d sprayed callers", s.Len(), i+1)
		}
	}
	ok, rem, retry := s.Allow("victim", localAt(10), 2) // 1s later: exactly 1 token
	if ok || rem != 1 || retry != time.Second {
		t.Fatalf("drained caller after 1s: (%v, %d, %v), want (false, 1, 1s)", ok, rem, retry)
	}
	if got := s.Overflowed(); got != 1000 {
		t.Fatalf("Overflowed = %d, want 1000", got)
	}
}

func TestLocalOverflowLimiterIsShared(t *testing.T) {
	s := New(Options{Rate: 1, Burst: 3, MaxLimiters: 1, Shards: 1})
	s.Allow("resident", localAt(0), 3)
	var allowed int
	for i := range 10 {
		if ok, _, _ := s.Allow(fmt.Sprintf("new-%d", i), localAt(0), 1); ok {
			allowed++
		}
	}
	if allowed != 3 {
		t.Fatalf("overflow admitted %d distinct callers at one instant, want 3 (one burst)", allowed)
	}
	ok, rem, retry := s.Allow("new-x", localAt(0), 1)
	if ok || rem != 0 || retry != time.Second {
		t.Fatalf("overflow denial = (%v, %d, %v), want (false, 0, 1s)", ok, rem, retry)
	}
	if got := s.Overflowed(); got != 11 {
		t.Fatalf("Overflowed = %d, want 11", got)
	}
}

func TestLocalLenBounded(t *testing.T) {
	const keys, maxLim = 100_000, 1000
	t.Run("idle callers are evicted", func(t *testing.T) {
		// Each caller takes 1 of 2 tokens and is full again 1ms later.
		s := New(Options{Rate: 1000, Burst: 2, MaxLimiters: maxLim})
		for i := range keys {
			now := localT0.Add(time.Duration(i) * 100 * time.Microsecond)
			if ok, _, _ := s.Allow(fmt.Sprintf("k%d", i), now, 1); !ok {
				t.Fatalf("caller %d denied", i)
			}
			if s.Len() > maxLim {
				t.Fatalf("Len = %d > %d", s.Len(), maxLim)
			}
		}
		if s.Overflowed() != 0 {
			t.Fatalf("Overflowed = %d, want 0: idle callers were not reclaimed", s.Overflowed())
		}
	})
	t.Run("busy callers are kept", func(t *testing.T) {
		// Nobody refills within the test: the set fills and the rest overflows.
		s := New(Options{Rate: 1e-6, Burst: 2, MaxLimiters: maxLim})
		for i := range keys {
			s.Allow(fmt.Sprintf("k%d", i), localAt(i), 1)
		}
		if s.Len() != maxLim {
			t.Fatalf("Len = %d, want %d", s.Len(), maxLim)
		}
		if got := s.Overflowed(); got != keys-maxLim {
			t.Fatalf("Overflowed = %d, want %d", got, keys-maxLim)
		}
	})
}

func TestLocalClockGoesBackwards(t *testing.T) {
	s := New(Options{Rate: 1, Burst: 2})
	runLocalSteps(t, s, []localStep{
		{"a", localAt(100), 1, true, 1, 0},
		// 5s earlier: treated as t0+10s, so the token left is usable...
		{"a", localAt(50), 1, true, 0, 0},
		// ...but the step back created no refill to spend at t0+10s.
		{"a", localAt(100), 1, false, 0, time.Second},
		{"a", localAt(0), 1, false, 0, time.Second},
		{"a", localAt(105), 1, false, 0, 500 * time.Millisecond},
		{"a", localAt(110), 1, true, 0, 0},
	})
}

func TestLocalDegenerateOptions(t *testing.T) {
	inf := New(Options{Rate: rate.Inf, Burst: 5})
	for range 100 {
		if ok, rem, retry := inf.Allow("k", localAt(0), 50); !ok || rem != 5 || retry != 0 {
			t.Fatalf("rate.Inf: (%v, %d, %v)", ok, rem, retry)
		}
	}
	if inf.Len() != 0 {
		t.Fatalf("rate.Inf keeps %d limiters", inf.Len())
	}

	none := New(Options{Rate: 0, Burst: 2})
	runLocalSteps(t, none, []localStep{
		{"k", localAt(0), 2, true, 0, 0},
		{"k", localAt(1000), 1, false, 0, rate.InfDuration},
		{"k", localAt(1000), -3, true, 0, 0}, // negative cost takes (and gives) nothing
	})

	zero := New(Options{Rate: 10, Burst: 0})
	runLocalSteps(t, zero, []localStep{
		{"k", localAt(0), 1, false, 0, rate.InfDuration},
		{"k", localAt(0), 0, true, 0, 0},
	})
	if zero.Len() != 0 {
		t.Fatalf("a caller that can never be admitted got a limiter")
	}

	if r, b := New(Options{Rate: 2.5, Burst: 7}).Limit(); r != 2.5 || b != 7 {
		t.Fatalf("Limit() = %v, %d", r, b)
	}
}

func TestLocalConcurrentHotKeyNeverOverspends(t *testing.T) {
	const burst, workers, calls = 100, 8, 500
	s := New(Options{Rate: 10, Burst: burst, MaxLimiters: 64})
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range calls {
				if ok, _, _ := s.Allow("hot", localAt(0), 1); ok {
					allowed.Add(1)
				}
				// Churn of other callers exercises eviction, stealing and
				// overflow concurrently with the hot key.
				s.Allow(fmt.Sprintf("w%d-%d", w, i), localAt(0), 1)
			}
		})
	}
	wg.Wait()
	if got := allowed.Load(); got != burst {
		t.Fatalf("hot key admitted %d at one instant, want exactly %d", got, burst)
	}
	if s.Len() > 64 {
		t.Fatalf("Len = %d > 64", s.Len())
	}
}

// TestLocalMatchesUnboundedBuckets checks that eviction is invisible: for
// every caller that never went through overflow, a small set decides exactly
// as one x/time/rate limiter per caller kept forever would (with the same
// clamp of backward time).
func TestLocalMatchesUnboundedBuckets(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := rate.Limit(rapid.SampledFrom([]float64{0.5, 1, 3, 10}).Draw(t, "rate"))
		burst := rapid.IntRange(1, 5).Draw(t, "burst")
		s := New(Options{Rate: r, Burst: burst, MaxLimiters: rapid.IntRange(1, 4).Draw(t, "max"), Shards: 1})
		ref := map[string]*rate.Limiter{}
		spilled := map[string]bool{}
		var hw time.Time
		now := localT0
		for i, n := 0, rapid.IntRange(1, 200).Draw(t, "steps"); i < n; i++ {
			key := fmt.Sprintf("k%d", rapid.IntRange(0, 6).Draw(t, "key"))
			now = now.Add(time.Duration(rapid.IntRange(-50, 400).Draw(t, "dt_ms")) * time.Millisecond)
			cost := rapid.IntRange(0, burst).Draw(t, "cost")
			before := s.Overflowed()
			ok, rem, retry := s.Allow(key, now, cost)
			if int64(s.Len()) > s.max {
				t.Fatalf("Len %d above cap", s.Len())
			}
			if now.After(hw) {
				hw = now
			}
			if s.Overflowed() != before {
				spilled[key] = true
				// Overflow only when nothing could be evicted (the cap is
				// below the scan bound, so every limiter was examined).
				for k, e := range s.shards[0].m {
					if e.lim.TokensAt(hw) >= float64(burst) {
						t.Fatalf("step %d: %s overflowed while %s was full", i, key, k)
					}
				}
			}
			lim := ref[key]
			if lim == nil {
				lim = rate.NewLimiter(r, burst)
				ref[key] = lim
			}
			wantOK := lim.AllowN(hw, cost)
			if spilled[key] {
				continue
			}
			wantRem := int(lim.TokensAt(hw))
			if ok != wantOK || rem != wantRem {
				t.Fatalf("step %d %s cost %d at %v: (%v, %d), unbounded buckets say (%v, %d)",
					i, key, cost, now.Sub(localT0), ok, rem, wantOK, wantRem)
			}
			if ok != (retry == 0) {
				t.Fatalf("step %d: ok %v with retryAfter %v", i, ok, retry)
			}
		}
	})
}
