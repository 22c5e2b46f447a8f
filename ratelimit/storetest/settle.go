package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

// RunSettle checks ratelimit.Settler (Run includes it): refunds capped at
// capacity, charges into debt with exact retry times, idempotence per id,
// and atomicity of a settlement's items. A store that is not a Settler
// skips it.
func RunSettle(t *testing.T, newStore NewStore) {
	for _, s := range specs(5, 10*time.Second) {
		t.Run(s.alg.String(), func(t *testing.T) {
			t.Run("refund_capped", func(t *testing.T) { testSettleRefundCapped(newEnv(t, newStore), s) })
			t.Run("idempotent", func(t *testing.T) { testSettleIdempotent(newEnv(t, newStore), s) })
			t.Run("refill", func(t *testing.T) { testSettleRefill(newEnv(t, newStore), s) })
		})
	}
	t.Run("refund_to_reservation", func(t *testing.T) { testSettleRefundToReservation(t, newStore) })
	t.Run("debt", func(t *testing.T) { testSettleDebt(t, newStore) })
	t.Run("atomic", func(t *testing.T) { testSettleAtomic(newEnv(t, newStore)) })
	t.Run("invalid", func(t *testing.T) { testSettleInvalid(newEnv(t, newStore)) })
}

// settler returns the env's store as a Settler, skipping the test when it
// is not one.
func (e *env) settler() ratelimit.Settler {
	e.t.Helper()
	s, ok := e.store.(ratelimit.Settler)
	if !ok {
		e.t.Skipf("%T is not a ratelimit.Settler", e.store)
	}
	return s
}

// settle settles deltas on items (in order) under id and returns whether
// the call applied, failing the test on error.
func (e *env) settle(id string, deltas []int64, items ...ratelimit.Item) bool {
	e.t.Helper()
	ss := make([]ratelimit.Settlement, len(items))
	for i := range items {
		ss[i] = ratelimit.Settlement{Item: items[i], Delta: deltas[i]}
	}
	applied, err := e.settler().Settle(context.Background(), e.prefix+id, ss)
	if err != nil {
		e.t.Fatalf("Settle(%s): %v", id, err)
	}
	return applied
}

// settleAt settles delta on it under id for a reservation decided at
// reservedAt (a Result.DecidedAt) and returns whether the call applied.
func (e *env) settleAt(id string, delta, reservedAt int64, it ratelimit.Item) bool {
	e.t.Helper()
	ss := []ratelimit.Settlement{{Item: it, Delta: delta, ReservedAt: reservedAt}}
	applied, err := e.settler().Settle(context.Background(), e.prefix+id, ss)
	if err != nil {
		e.t.Fatalf("Settle(%s): %v", id, err)
	}
	return applied
}

// reserve takes cost from key name at the env's clock and returns the
// decision's time, checking that it is the clock's.
func (e *env) reserve(name string, s spec, cost int64) int64 {
	e.t.Helper()
	r := e.one(e.item(name, s, cost))
	if !r.Allowed {
		e.t.Fatalf("reserving %d of %s: denied (%+v)", cost, name, r)
	}
	if now := e.clock.Now().UnixMicro(); r.DecidedAt != now {
		e.t.Fatalf("reservation decided at %d µs, want the store's clock %d", r.DecidedAt, now)
	}
	return r.DecidedAt
}

// refundCase is a reservation of 500 units at at(reserveAt), then others'
// 100 units at at(otherAt), then a refund of 470 of the reservation at
// at(settled), and the remaining units expected at at(k) for each k of
// probes (probes[k]); applies says whether the refund is to take effect.
type refundCase struct {
	name                        string
	s                           spec
	reserveAt, otherAt, settled int
	applies                     bool
	probes                      map[int]int64
}

// testSettleRefundToReservation: a refund comes off what the reservation
// charged, where it charged it: the window, bucket or log entries of its
// time. Once they have left the window the refund is dropped, so a
// refund settled after a boundary never frees units of the newer window;
// a charge still lands at the settlement's time.
func testSettleRefundToReservation(t *testing.T, newStore NewStore) {
	fw := spec{ratelimit.FixedWindow, ratelimit.Limit{Rate: 1000, Per: 10 * time.Second}}
	sw := spec{ratelimit.SlidingWindow, ratelimit.Limit{Rate: 1000, Per: 10 * time.Second, Buckets: 5}} // buckets of 2 s
	sl := spec{ratelimit.SlidingLog, ratelimit.Limit{Rate: 1000, Per: 10 * time.Second}}
	cases := []refundCase{
		// Window [0, 10 s) holds 500, then 100 more and a refund of 470
		// in it: 130 counted.
		{"fixed_window_same_window", fw, 1, 50, 60, true, map[int]int64{60: 870}},
		// Reserved at 9.9 s in window A, the others' 100 and the refund in
		// window B at 10 s: B keeps its 900.
		{"fixed_window_after_boundary", fw, 99, 100, 101, false, map[int]int64{101: 900}},
		// Bucket 0 holds 500, bucket 2 the others' 100: the refund leaves
		// 30 in bucket 0 (it leaves at 12 s) and 100 in bucket 2 (at 16 s).
		{"sliding_window_reservation_bucket", sw, 0, 40, 41, true, map[int]int64{41: 870, 120: 900, 160: 1000}},
		// Bucket 0 has left the window at 12 s: the others' 100 at 12 s
		// stay counted.
		{"sliding_window_bucket_left", sw, 0, 120, 121, false, map[int]int64{121: 900}},
		// Entries (0 s, 30) and (4 s, 100) after the refund: at 10 s the
		// first has left, at 14 s both.
		{"sliding_log_reservation_entry", sl, 0, 40, 41, true, map[int]int64{41: 870, 100: 900, 140: 1000}},
		// The reservation's entry left at 10 s: the others' 100 stay.
		{"sliding_log_entry_left", sl, 0, 100, 101, false, map[int]int64{101: 900}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, newStore)
			e.set(c.reserveAt)
			reservedAt := e.reserve("k", c.s, 500)
			e.set(c.otherAt)
			e.reserve("k", c.s, 100)
			e.set(c.settled)
			if !e.settleAt("refund", -470, reservedAt, e.item("k", c.s, 0)) {
				t.Fatal("settlement not applied: its id is new")
			}
			for _, k := range slices.Sorted(maps.Keys(c.probes)) {
				e.set(k)
				e.wantRemaining(fmt.Sprintf("at t0+%v (refund applies: %v)", time.Duration(k)*100*ms, c.applies), "k", c.s, c.probes[k])
			}
		})
	}
	t.Run("calendar_month_after_boundary", func(t *testing.T) {
		// Reserved in the last second of November, settled in December:
		// December's count is not touched.
		e := newEnv(t, newStore)
		s := spec{ratelimit.FixedWindow, ratelimit.Limit{Rate: 1000, Calendar: ratelimit.Calendar{Unit: ratelimit.Month}}}
		dec := time.Date(2023, 12, 1, 0, 0, 0, 0, time.UTC)
		e.clock.Set(dec.Add(-time.Second))
		reservedAt := e.reserve("m", s, 500)
		e.clock.Set(dec.Add(time.Second))
		e.reserve("m", s, 100)
		e.settleAt("refund", -470, reservedAt, e.item("m", s, 0))
		e.wantRemaining("December after a refund of November's reservation", "m", s, 900)
		// A refund of December's own reservation still credits.
		e.settleAt("refund-dec", -60, e.clock.Now().UnixMicro(), e.item("m", s, 0))
		e.wantRemaining("December after refunding 60 of its own", "m", s, 960)
	})
	t.Run("charge_lands_now", func(t *testing.T) {
		// A charge of a reservation of an ended window counts in the
		// current one.
		e := newEnv(t, newStore)
		e.set(99)
		reservedAt := e.reserve("k", fw, 500)
		e.set(100)
		e.settleAt("charge", 300, reservedAt, e.item("k", fw, 0))
		e.wantRemaining("window B after a charge of 300", "k", fw, 700)
	})
}

// testSettleRefundCapped: a refund larger than what was taken fills the
// key, never beyond its capacity (the next full cost fits, one more does
// not).
func testSettleRefundCapped(e *env, s spec) {
	e.set(0)
	e.wantAllowed("reserve 3", e.one(e.item("k", s, 3)), true)
	if !e.settle("r1", []int64{-1}, e.item("k", s, 0)) {
		e.t.Fatal("first settlement not applied")
	}
	e.wantRemaining("after refunding 1 of 3", "k", s, 3)
	e.settle("r2", []int64{-100}, e.item("k", s, 0))
	e.wantRemaining("after refunding 100", "k", s, 5)
	e.wantAllowed("the full capacity", e.one(e.item("k", s, 5)), true)
	e.wantAllowed("one more", e.one(e.item("k", s, 1)), false)

	// A refund to a key that holds nothing changes nothing.
	e.settle("r3", []int64{-2}, e.item("fresh", s, 0))
	e.wantRemaining("refund to an absent key", "fresh", s, 5)
	e.wantAllowed("fresh key, full capacity", e.one(e.item("fresh", s, 5)), true)
	e.wantAllowed("fresh key, one more", e.one(e.item("fresh", s, 1)), false)
}

// testSettleRefill: a refund of MaxSettleDelta units without a
// reservation time (ReservedAt 0) brings a key back to its full capacity
// from anywhere, debt included: how the admin console resets a tenant's
// key, with the one mechanism that gives units back.
func testSettleRefill(e *env, s spec) {
	e.set(0)
	e.wantAllowed("take all", e.one(e.item("k", s, s.capacity())), true)
	e.settle("charge", []int64{1000}, e.item("k", s, 0))
	if r := e.one(e.item("k", s, 1)); r.Allowed || r.Debt != 1000 {
		e.t.Fatalf("after a charge of 1000 beyond the capacity: %+v, want denied in debt of 1000", r)
	}
	e.set(1)
	if !e.settle("refill", []int64{-ratelimit.MaxSettleDelta(s.alg, s.lim)}, e.item("k", s, 0)) {
		e.t.Fatal("refill not applied: its id is new")
	}
	if r := e.one(e.item("k", s, 0)); r.Remaining != s.capacity() || r.Debt != 0 || r.ResetAfter != 0 {
		e.t.Errorf("after the refill: %+v, want the full %d, no debt, nothing to reset", r, s.capacity())
	}
	e.wantAllowed("the full capacity after the refill", e.one(e.item("k", s, s.capacity())), true)
	e.wantAllowed("one more", e.one(e.item("k", s, 1)), false)
}

// testSettleIdempotent: a settlement repeated with the same id (a retry)
// is applied once; another id applies again.
func testSettleIdempotent(e *env, s spec) {
	e.set(0)
	e.wantAllowed("reserve 5", e.one(e.item("k", s, 5)), true)
	if !e.settle("same", []int64{-2}, e.item("k", s, 0)) {
		e.t.Fatal("first settlement not applied")
	}
	if e.settle("same", []int64{-2}, e.item("k", s, 0)) {
		e.t.Error("retried settlement reported as applied")
	}
	e.wantRemaining("refund 2, retried", "k", s, 2)
	if !e.settle("other", []int64{-1}, e.item("k", s, 0)) {
		e.t.Fatal("settlement with another id not applied")
	}
	e.wantRemaining("then refund 1 under another id", "k", s, 3)
	// A retried charge is not charged twice either.
	e.settle("charge", []int64{3}, e.item("k", s, 0))
	e.settle("charge", []int64{3}, e.item("k", s, 0))
	e.wantRemaining("charge 3, retried", "k", s, 0)
	if r := e.one(e.item("k", s, 0)); !r.Allowed {
		e.t.Errorf("a cost of 0 must be allowed even at 0 remaining: %+v", r)
	}
}

// debtCase is one algorithm driven into debt: at at(take) cost take
// units, at at(chargeAt) charge charge more; at at(probe) a cost of 1 must
// be denied with exactly retry, reporting debt, and at at(probe)+retry
// allowed.
type debtCase struct {
	name     string
	s        spec
	take     int64
	chargeAt int
	charge   int64
	probe    int
	retry    time.Duration
	debt     int64
}

// testSettleDebt: a charge beyond what the key holds is applied, the key
// denies every cost while in debt, with the exact time to repayment, and
// reports nothing remaining.
func testSettleDebt(t *testing.T, newStore NewStore) {
	cases := []debtCase{
		// 5 tokens, one every 100 ms: at 0 the bucket is 5-5-3 = -3; a
		// cost of 1 needs 4 tokens, 400 ms; at 300 ms, 100 ms.
		{"token_bucket", spec{ratelimit.TokenBucket, ratelimit.Limit{Rate: 100, Per: 10 * time.Second, Burst: 5}}, 5, 0, 3, 0, 400 * ms, 3},
		// 200 ms later: 2 tokens refilled, 1 still owed.
		{"token_bucket_later", spec{ratelimit.TokenBucket, ratelimit.Limit{Rate: 100, Per: 10 * time.Second, Burst: 5}}, 5, 0, 3, 2, 200 * ms, 1},
		// 8 counted of 5 in the window [0, 10 s): denied until it ends.
		{"fixed_window", spec{ratelimit.FixedWindow, ratelimit.Limit{Rate: 5, Per: 10 * time.Second}}, 2, 10, 6, 50, 5 * time.Second, 3},
		// Buckets of 2 s: 2+6 units in bucket 0, which leaves at 12 s.
		{"sliding_window", spec{ratelimit.SlidingWindow, ratelimit.Limit{Rate: 5, Per: 10 * time.Second, Buckets: 5}}, 2, 10, 6, 50, 7 * time.Second, 3},
		// Entries (0 s, 2) and (1 s, 6): 8 used; a cost of 1 needs 4 to
		// leave, which the entry at 1 s does at 11 s.
		{"sliding_log", spec{ratelimit.SlidingLog, ratelimit.Limit{Rate: 5, Per: 10 * time.Second}}, 2, 10, 6, 50, 6 * time.Second, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, newStore)
			e.set(0)
			e.wantAllowed("reserve", e.one(e.item("k", c.s, c.take)), true)
			e.set(c.chargeAt)
			if !e.settle("charge", []int64{c.charge}, e.item("k", c.s, 0)) {
				t.Fatal("charge not applied")
			}
			e.set(c.probe)
			r := e.one(e.item("k", c.s, 1))
			if r.Allowed || r.RetryAfter != c.retry || r.Remaining != 0 || r.Debt != c.debt {
				t.Errorf("in debt, cost 1: got allowed=%v remaining=%d retry=%v debt=%d, want denied, 0 remaining, retry %v, debt %d",
					r.Allowed, r.Remaining, r.RetryAfter, r.Debt, c.retry, c.debt)
			}
			e.clock.Set(at(c.probe).Add(c.retry - time.Microsecond))
			if r := e.one(e.item("k", c.s, 1)); r.Allowed {
				t.Errorf("1 µs before the debt is repaid: allowed, want denied (retry %v)", r.RetryAfter)
			}
			e.clock.Set(at(c.probe).Add(c.retry))
			e.wantAllowed("once the debt is repaid", e.one(e.item("k", c.s, 1)), true)
		})
	}
	t.Run("calendar_month", func(t *testing.T) {
		// A monthly quota charged past its limit waits for the next month.
		e := newEnv(t, newStore)
		lim := ratelimit.Limit{Rate: 1000, Calendar: ratelimit.Calendar{Unit: ratelimit.Month}}
		s := spec{ratelimit.FixedWindow, lim}
		e.set(0)
		e.wantAllowed("reserve", e.one(e.item("m", s, 500)), true)
		e.settle("charge", []int64{700}, e.item("m", s, 0))
		end := time.Date(2023, 12, 1, 0, 0, 0, 0, time.UTC)
		r := e.one(e.item("m", s, 1))
		if r.Allowed || r.RetryAfter != end.Sub(at(0)) || r.Debt != 200 {
			t.Errorf("month in debt: got %+v, want denied until %v (%v)", r, end, end.Sub(at(0)))
		}
		e.clock.Set(end)
		if r := e.one(e.item("m", s, 1000)); !r.Allowed || r.Debt != 0 {
			t.Errorf("next month: %+v, want the full 1000 allowed and no debt", r)
		}
	})
}

// testSettleAtomic: the settlements of one call are applied together or
// not at all, and a retry applies none of them again.
func testSettleAtomic(e *env) {
	tb := spec{ratelimit.TokenBucket, ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 10}}
	fw := spec{ratelimit.FixedWindow, ratelimit.Limit{Rate: 10, Per: time.Hour}}
	sl := spec{ratelimit.SlidingLog, ratelimit.Limit{Rate: 10, Per: time.Hour}}
	e.set(0)
	e.decide(e.item("a", tb, 8), e.item("b", fw, 8), e.item("c", sl, 8))
	if !e.settle("x", []int64{-5, 4, -8}, e.item("a", tb, 0), e.item("b", fw, 0), e.item("c", sl, 0)) {
		e.t.Fatal("settlement not applied")
	}
	e.wantRemaining("token bucket refunded 5", "a", tb, 7)
	e.wantRemaining("fixed window charged into debt", "b", fw, 0)
	e.wantRemaining("sliding log refunded all", "c", sl, 10)
	if e.settle("x", []int64{-5, -12, 3}, e.item("a", tb, 0), e.item("b", fw, 0), e.item("c", sl, 0)) {
		e.t.Error("retry applied")
	}
	e.wantRemaining("token bucket after the retry", "a", tb, 7)
	e.wantRemaining("fixed window after the retry", "b", fw, 0)
	e.wantRemaining("sliding log after the retry", "c", sl, 10)

	// One invalid settlement: nothing of the call is applied, and the id
	// stays free.
	bad := e.item("a", tb, 0)
	bad.Limit.Burst = 0
	_, err := e.settler().Settle(context.Background(), e.prefix+"y", []ratelimit.Settlement{{Item: e.item("c", sl, 0), Delta: 3}, {Item: bad, Delta: -1}})
	if !errors.Is(err, ratelimit.ErrInvalid) {
		e.t.Fatalf("invalid settlement: err = %v, want ErrInvalid", err)
	}
	e.wantRemaining("sliding log after an invalid settlement", "c", sl, 10)
	if !e.settle("y", []int64{3}, e.item("c", sl, 0)) {
		e.t.Error("an id whose settlement was invalid was used up")
	}
	e.wantRemaining("sliding log charged 3", "c", sl, 7)
}

func testSettleInvalid(e *env) {
	s := e.settler()
	tb := ratelimit.Limit{Rate: 5, Per: time.Second, Burst: 5}
	k := e.key("inv")
	cases := []struct {
		name  string
		id    string
		items []ratelimit.Settlement
	}{
		{"empty id", "", []ratelimit.Settlement{{Item: ratelimit.Item{Key: k, Algorithm: ratelimit.TokenBucket, Limit: tb}, Delta: 1}}},
		{"empty key", "i", []ratelimit.Settlement{{Item: ratelimit.Item{Algorithm: ratelimit.TokenBucket, Limit: tb}, Delta: 1}}},
		{"unknown algorithm", "i", []ratelimit.Settlement{{Item: ratelimit.Item{Key: k, Algorithm: 99, Limit: tb}, Delta: 1}}},
		{"delta beyond exact", "i", []ratelimit.Settlement{{Item: ratelimit.Item{Key: k, Algorithm: ratelimit.TokenBucket, Limit: tb}, Delta: 1 << 40}}},
		{"concurrency", "i", []ratelimit.Settlement{{Item: ratelimit.Item{Key: k, Algorithm: ratelimit.Concurrency, Limit: ratelimit.Limit{Max: 2, Per: time.Second}}, Delta: 1}}},
		{"negative reservation time", "i", []ratelimit.Settlement{{Item: ratelimit.Item{Key: k, Algorithm: ratelimit.SlidingLog, Limit: ratelimit.Limit{Rate: 1, Per: time.Second}}, Delta: -1, ReservedAt: -1}}},
		{"reservation time beyond exact", "i", []ratelimit.Settlement{{Item: ratelimit.Item{Key: k, Algorithm: ratelimit.SlidingLog, Limit: ratelimit.Limit{Rate: 1, Per: time.Second}}, Delta: -1, ReservedAt: 1<<53 + 1}}},
		{"negative delta beyond exact", "i", []ratelimit.Settlement{{Item: ratelimit.Item{Key: k, Algorithm: ratelimit.FixedWindow, Limit: ratelimit.Limit{Rate: 1, Per: time.Second}}, Delta: -(1 << 54)}}},
	}
	for _, c := range cases {
		if _, err := s.Settle(context.Background(), c.id, c.items); !errors.Is(err, ratelimit.ErrInvalid) {
			e.t.Errorf("%s: err = %v, want one wrapping ErrInvalid", c.name, err)
		}
	}
}
