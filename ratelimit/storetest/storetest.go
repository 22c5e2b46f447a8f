// Package storetest is the conformance suite that every ratelimit.Store
// passes: step tables of each algorithm, batch atomicity, shadow items,
// clock jumps, exact retry times, idle keys and concurrency, the
// concurrency slots of a ratelimit.SlotStore, and the settlements of a
// ratelimit.Settler (refunds, debt, idempotence).
//
// The suite never assumes an empty store: every subtest works under its own
// random key prefix, so it can run against a shared or persistent store.
// All keys of one subtest share one hash tag ("{...}"), so a store that
// groups keys by tag still decides each batch of the suite as one group.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"github.com/quotagate/quotagate/internal/testclock"
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

// NewStore returns the store under test. It is called once per subtest with
// that subtest's t and a clock that the store must read for its current time.
// The store may be shared between calls; if it must be closed, NewStore
// registers that with t.Cleanup.
type NewStore func(t *testing.T, now func() time.Time) ratelimit.Store

// t0 is the suite's epoch: a multiple of 10 s since the Unix epoch, so
// windows of 1 s and 10 s start on it.
var t0 = time.Unix(1_700_000_000, 0)

// at returns the instant t0 + k×100ms.
func at(k int) time.Time {
	return t0.Add(time.Duration(k) * 100 * time.Millisecond)
}

// Clock is the tests' shared fake clock (internal/testclock), named here so
// store tests need one import.
type Clock = testclock.Clock

// NewClock returns a Clock set to t.
func NewClock(t time.Time) *Clock { return testclock.New(t) }

// WarmUp decides items on s until a call succeeds, at most 20 times, and
// fails tb if none does: the first call to a Redis store dials and loads
// the script, which a loaded machine can stretch past a short test timeout.
func WarmUp(tb testing.TB, s ratelimit.Store, items []ratelimit.Item) {
	tb.Helper()
	var err error
	for range 20 {
		if _, err = s.Decide(context.Background(), items); err == nil {
			return
		}
	}
	tb.Fatalf("store never answered: %v", err)
}

// env is one subtest's store, clock and key prefix.
type env struct {
	t      *testing.T
	store  ratelimit.Store
	clock  *Clock
	prefix string
}

func newEnv(t *testing.T, newStore NewStore) *env {
	t.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("random key prefix: %v", err)
	}
	c := NewClock(t0)
	return &env{
		t:      t,
		store:  newStore(t, c.Now),
		clock:  c,
		prefix: "{qgtest-" + hex.EncodeToString(b[:]) + "}:",
	}
}

// key returns the subtest's key for name.
func (e *env) key(name string) string { return e.prefix + name }

// set moves the clock to at(k).
func (e *env) set(k int) { e.clock.Set(at(k)) }

// decide decides items and fails the test on error or on a malformed
// Decision.
func (e *env) decide(items ...ratelimit.Item) ratelimit.Decision {
	e.t.Helper()
	d, err := e.store.Decide(context.Background(), items)
	if err != nil {
		e.t.Fatalf("Decide: %v", err)
	}
	if len(d.Results) != len(items) {
		e.t.Fatalf("Decide returned %d results for %d items", len(d.Results), len(items))
	}
	return d
}

// one decides a single non-shadow item and returns its result, checking
// that the Decision agrees with it.
func (e *env) one(it ratelimit.Item) ratelimit.Result {
	e.t.Helper()
	d := e.decide(it)
	r := d.Results[0]
	if d.Allowed != r.Allowed {
		e.t.Fatalf("Decision.Allowed = %v, but its only result has Allowed = %v", d.Allowed, r.Allowed)
	}
	if d.RetryAfter != r.RetryAfter {
		e.t.Fatalf("Decision.RetryAfter = %v, its only result's = %v", d.RetryAfter, r.RetryAfter)
	}
	return r
}

// item returns an item of key name under spec with the given cost.
func (e *env) item(name string, s spec, cost int64) ratelimit.Item {
	return ratelimit.Item{Key: e.key(name), Algorithm: s.alg, Limit: s.lim, Cost: cost}
}

// stamped returns r decided now: its DecidedAt is the env's clock, which
// the store decides by.
func (e *env) stamped(r ratelimit.Result) ratelimit.Result {
	r.DecidedAt = e.clock.Now().UnixMicro()
	return r
}

// remaining peeks at a key (cost 0) and returns its Remaining.
func (e *env) remaining(name string, s spec) int64 {
	e.t.Helper()
	return e.one(e.item(name, s, 0)).Remaining
}

// spec is an algorithm with a limit.
type spec struct {
	alg ratelimit.Algorithm
	lim ratelimit.Limit
}

func (s spec) capacity() int64 { return ratelimit.Capacity(s.alg, s.lim) }

// specs returns one spec per algorithm with capacity c, refilling c units
// per per.
func specs(c int64, per time.Duration) []spec {
	return []spec{
		{ratelimit.TokenBucket, ratelimit.Limit{Rate: c, Per: per, Burst: c}},
		{ratelimit.FixedWindow, ratelimit.Limit{Rate: c, Per: per}},
		{ratelimit.SlidingWindow, ratelimit.Limit{Rate: c, Per: per}},
		{ratelimit.SlidingLog, ratelimit.Limit{Rate: c, Per: per}},
	}
}

// step is one row of a step table: at instant at(k), take cost and expect
// the rest.
type step struct {
	k         int
	cost      int64
	allowed   bool
	remaining int64
	retry     time.Duration
	reset     time.Duration
}

func (e *env) runSteps(s spec, steps []step) {
	e.t.Helper()
	for i, st := range steps {
		e.set(st.k)
		r := e.one(e.item("steps", s, st.cost))
		want := e.stamped(ratelimit.Result{Allowed: st.allowed, Limit: s.capacity(), Remaining: st.remaining, RetryAfter: st.retry, ResetAfter: st.reset})
		if r != want {
			e.t.Errorf("step %d (t0+%v, cost %d):\n got %+v\nwant %+v", i, time.Duration(st.k)*100*time.Millisecond, st.cost, r, want)
		}
	}
}

const ms = time.Millisecond

// Run runs the whole conformance suite against the stores newStore returns.
func Run(t *testing.T, newStore NewStore) {
	t.Run("steps", func(t *testing.T) { runStepTables(t, newStore) })
	for _, s := range specs(5, 10*time.Second) {
		t.Run(s.alg.String(), func(t *testing.T) {
			for _, c := range behaviours {
				t.Run(c.name, func(t *testing.T) { c.run(newEnv(t, newStore), s) })
			}
		})
	}
	t.Run("calendar", func(t *testing.T) { testCalendar(t, newStore) })
	t.Run("settle", func(t *testing.T) { RunSettle(t, newStore) })
	t.Run("invalid", func(t *testing.T) { testInvalid(newEnv(t, newStore)) })
	t.Run("sliding_window_bound", func(t *testing.T) { testSlidingWindowBound(newEnv(t, newStore)) })
	t.Run("retry_after_is_longest_denial", func(t *testing.T) { testRetryAfterMax(newEnv(t, newStore)) })
	t.Run("done_context", func(t *testing.T) { testDoneContext(newEnv(t, newStore)) })
	t.Run("concurrency_slots", func(t *testing.T) { testSlots(t, newStore) })
	t.Run("concurrent", func(t *testing.T) {
		for _, s := range specs(100, time.Minute) {
			t.Run(s.alg.String(), func(t *testing.T) { testConcurrent(newEnv(t, newStore), s) })
		}
	})
}

func runStepTables(t *testing.T, newStore NewStore) {
	t.Run("token_bucket", func(t *testing.T) {
		// 5 tokens, one more every 100 ms.
		newEnv(t, newStore).runSteps(spec{ratelimit.TokenBucket, ratelimit.Limit{Rate: 100, Per: 10 * time.Second, Burst: 5}}, []step{
			{k: 0, cost: 1, allowed: true, remaining: 4, reset: 100 * ms},
			{k: 0, cost: 4, allowed: true, remaining: 0, reset: 500 * ms},
			{k: 0, cost: 1, remaining: 0, retry: 100 * ms, reset: 500 * ms},
			{k: 1, cost: 1, allowed: true, remaining: 0, reset: 500 * ms},
			{k: 1, cost: 0, allowed: true, remaining: 0, reset: 500 * ms},
			{k: 3, cost: 3, remaining: 2, retry: 100 * ms, reset: 300 * ms},
			{k: 4, cost: 3, allowed: true, remaining: 0, reset: 500 * ms},
			{k: 4, cost: 5, remaining: 0, retry: 500 * ms, reset: 500 * ms},
			{k: 100, cost: 0, allowed: true, remaining: 5},
		})
	})
	t.Run("token_bucket_fractional", func(t *testing.T) {
		// 2 tokens, 3 per second: one every 333333.3 µs, kept exactly.
		us := time.Microsecond
		newEnv(t, newStore).runSteps(spec{ratelimit.TokenBucket, ratelimit.Limit{Rate: 3, Per: time.Second, Burst: 2}}, []step{
			{k: 0, cost: 2, allowed: true, remaining: 0, reset: 666667 * us},
			{k: 1, cost: 1, remaining: 0, retry: 233334 * us, reset: 566667 * us},
			{k: 4, cost: 1, allowed: true, remaining: 0, reset: 600000 * us},
			{k: 4, cost: 1, remaining: 0, retry: 266667 * us, reset: 600000 * us},
			{k: 7, cost: 0, allowed: true, remaining: 1, reset: 300000 * us},
		})
	})
	t.Run("fixed_window", func(t *testing.T) {
		newEnv(t, newStore).runSteps(spec{ratelimit.FixedWindow, ratelimit.Limit{Rate: 3, Per: 10 * time.Second}}, []step{
			{k: 0, cost: 1, allowed: true, remaining: 2, reset: 10 * time.Second},
			{k: 50, cost: 2, allowed: true, remaining: 0, reset: 5 * time.Second},
			{k: 50, cost: 1, remaining: 0, retry: 5 * time.Second, reset: 5 * time.Second},
			{k: 50, cost: 0, allowed: true, remaining: 0, reset: 5 * time.Second},
			{k: 99, cost: 1, remaining: 0, retry: 100 * ms, reset: 100 * ms},
			{k: 100, cost: 1, allowed: true, remaining: 2, reset: 10 * time.Second},
			{k: 150, cost: 3, remaining: 2, retry: 5 * time.Second, reset: 5 * time.Second},
			{k: 250, cost: 0, allowed: true, remaining: 3},
		})
	})
	t.Run("sliding_window", func(t *testing.T) {
		// 5 buckets of 2 s; an item fits when the 6 buckets ending at now
		// leave room for it.
		newEnv(t, newStore).runSteps(spec{ratelimit.SlidingWindow, ratelimit.Limit{Rate: 4, Per: 10 * time.Second, Buckets: 5}}, []step{
			// Bucket 0 leaves the window when bucket 6 begins, at 12 s.
			{k: 0, cost: 4, allowed: true, remaining: 0, reset: 12 * time.Second},
			{k: 50, cost: 1, remaining: 0, retry: 7 * time.Second, reset: 7 * time.Second},
			{k: 119, cost: 1, remaining: 0, retry: 100 * ms, reset: 100 * ms},
			{k: 120, cost: 1, allowed: true, remaining: 3, reset: 12 * time.Second},
			{k: 130, cost: 3, allowed: true, remaining: 0, reset: 11 * time.Second},
			// Bucket 6 (12-14 s) holds all 4 units: room only at 24 s.
			{k: 150, cost: 1, remaining: 0, retry: 9 * time.Second, reset: 9 * time.Second},
			{k: 150, cost: 0, allowed: true, remaining: 0, reset: 9 * time.Second},
			{k: 400, cost: 0, allowed: true, remaining: 4},
		})
	})
	t.Run("sliding_log", func(t *testing.T) {
		newEnv(t, newStore).runSteps(spec{ratelimit.SlidingLog, ratelimit.Limit{Rate: 3, Per: 10 * time.Second}}, []step{
			{k: 0, cost: 1, allowed: true, remaining: 2, reset: 10 * time.Second},
			{k: 10, cost: 2, allowed: true, remaining: 0, reset: 10 * time.Second},
			{k: 20, cost: 1, remaining: 0, retry: 8 * time.Second, reset: 9 * time.Second},
			// The admission at t0 leaves exactly at t0+10s.
			{k: 100, cost: 1, allowed: true, remaining: 0, reset: 10 * time.Second},
			{k: 105, cost: 2, remaining: 0, retry: 500 * ms, reset: 9500 * ms},
			{k: 110, cost: 2, allowed: true, remaining: 0, reset: 10 * time.Second},
			{k: 300, cost: 0, allowed: true, remaining: 3},
		})
	})
}
