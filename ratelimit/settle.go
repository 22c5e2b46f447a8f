package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Settlement is one key's adjustment in a Settler.Settle call: the
// difference between what a request reserved and what it turned out to use.
type Settlement struct {
	// Item names the key and its limit: Key, Algorithm and Limit are used;
	// Cost, Shadow, OnError and Lease are ignored.
	Item Item
	// Delta is the signed number of units to apply: negative gives units
	// back (a refund), positive takes more (a charge), 0 changes nothing.
	// |Delta| must be at most MaxSettleDelta(Item.Algorithm, Item.Limit).
	Delta int64
	// ReservedAt is when the reservation being settled was decided, in µs
	// since the Unix epoch on the store's clock: the reserving decision's
	// Result.DecidedAt. A refund comes off what the reservation charged
	// (its window, bucket or log entries) and is dropped once those have
	// left the limit's window. A charge is not affected: it lands at the
	// settlement's time. 0 means unknown: a refund then comes off the
	// newest units, which may be newer than the reservation's (see
	// Settler). A ReservedAt after the settlement's time (the clock went
	// back) is taken as the settlement's time.
	ReservedAt int64
}

// SettleWindow is how long a Settler remembers a settlement id: a Settle
// repeated with the same id within it (a retry after a timeout) changes
// nothing. A retry follows its timeout at once; the window is far longer
// so that a late one is still caught, and short enough that the ids of a
// busy fleet stay few (one per settled request per window).
const SettleWindow = time.Minute

// Settler is a Store that can also settle: apply signed per-key deltas
// after the fact, atomically and at most once per id.
//
// What a settlement does per algorithm (see Settle for the arithmetic). A
// refund gives back only what the reservation charged and what is still
// counted: it comes off the window, bucket or log entries the reservation
// was counted in (Settlement.ReservedAt), and is dropped once they have
// left the limit's window, since those units are free again already.
//
//   - token_bucket: a refund puts units back, never above Burst; a charge
//     takes them even below zero. A bucket below zero is in debt: it
//     denies every cost until it has refilled past it, with the exact
//     RetryAfter. ReservedAt does not matter.
//   - fixed_window (calendar windows too): a refund takes units off the
//     count of the window holding ReservedAt, never below zero, and only
//     while that window is the one the key holds (a window that has ended
//     is gone, and with it the reservation); a charge adds them to the
//     current window's count even above Rate, which then denies until the
//     window ends. Debt does not carry into the next window.
//   - sliding_window: a refund takes units off the bucket holding
//     ReservedAt, never below zero, while that bucket is still in the
//     window; a charge adds them to the current bucket even past Rate,
//     which denies until enough buckets have left the window.
//   - sliding_log: a refund takes units off the entries stamped ReservedAt,
//     newest first, removing those that reach zero (entries that have left
//     the window are gone); a charge adds an entry of that cost at now,
//     which denies until it leaves the window.
//
// A settlement with ReservedAt 0 (unknown) refunds the newest units
// instead: a fixed window's current window, a sliding window's buckets
// and a sliding log's entries newest first. That may free units newer
// than the reservation's, or of a window that began after it, earlier
// than exact accounting would: by at most the refunded units, for at most
// the time between reservation and settlement.
//
// Settle applies every settlement of an atomic group (as Decide defines
// groups) in one step, or none. It is idempotent per id: within
// SettleWindow a Settle with an id already applied to a group changes
// nothing in that group, so a Settle that failed with an unknown outcome
// (a timeout) may be retried with the same id; it is the one store call that
// may be. applied reports whether anything was applied by this call (false
// when every group had been settled under id before). An id must be unique
// per request and chosen by the caller (never by a client, who could
// replay it to skip charges).
//
// Errors are as for Decide: ErrInvalid (a malformed settlement or empty
// id, before anything is applied) or ErrUnavailable.
type Settler interface {
	Store
	Settle(ctx context.Context, id string, items []Settlement) (applied bool, err error)
}

// ErrNoSettle is returned by a layer whose store below cannot settle.
var ErrNoSettle = errors.New("ratelimit: store cannot settle")

// settleVia settles on s when it is a Settler.
func SettleVia(ctx context.Context, s Store, id string, items []Settlement) (bool, error) {
	st, ok := s.(Settler)
	if !ok {
		return false, ErrNoSettle
	}
	return st.Settle(ctx, id, items)
}

// MaxSettleDelta returns the largest |Delta| a settlement of alg under l
// may have: 2^53 − 1 units for the window algorithms, 2^53/Per(µs) for a
// token bucket (whose level is kept as units × Per), and never 2^53 or
// more, so that every stored value stays exact in an IEEE double and the
// Redis scripts, which take integers below 2^53, accept every settlement
// that validates.
//
// A refund of MaxSettleDelta with ReservedAt 0 fills a key (see Settle):
// a window's count, buckets or log entries go to zero, whatever they
// hold; a token bucket is full unless it was more than MaxSettleDelta
// units short of full (its Burst and a debt that only charges of that
// size make: 2.5 M units for a Per of an hour), which leaves it less than
// one unit short.
func MaxSettleDelta(alg Algorithm, l Limit) int64 {
	if alg == TokenBucket {
		if p := l.Per.Microseconds(); p > 0 {
			return min(maxExact/p, maxExact-1)
		}
	}
	return maxExact - 1
}

// ValidateSettlement reports whether s can be settled: its Item with cost 0
// passes ValidateItem, it is not a Concurrency item (a slot is released,
// not settled), |Delta| <= MaxSettleDelta, and 0 <= ReservedAt <= 2^53.
// The error wraps ErrInvalid.
func ValidateSettlement(s Settlement) error {
	it := s.Item
	it.Cost = 0
	if err := ValidateItem(it); err != nil {
		return err
	}
	if it.Algorithm == Concurrency {
		return fmt.Errorf("%w: concurrency slots are released, not settled", ErrInvalid)
	}
	if m := MaxSettleDelta(it.Algorithm, it.Limit); s.Delta > m || s.Delta < -m {
		return fmt.Errorf("%w: settlement of %d units: at most %d either way", ErrInvalid, s.Delta, m)
	}
	if s.ReservedAt < 0 || s.ReservedAt > maxExact {
		return fmt.Errorf("%w: settlement reserved at %d µs: must be in [0, 2^53]", ErrInvalid, s.ReservedAt)
	}
	return nil
}

// validateSettle checks a Settle call's id and settlements.
func ValidateSettle(id string, items []Settlement) error {
	if id == "" {
		return fmt.Errorf("%w: empty settlement id", ErrInvalid)
	}
	for i := range items {
		if err := ValidateSettlement(items[i]); err != nil {
			return fmt.Errorf("settlement %d: %w", i, err)
		}
	}
	return nil
}

// Settle applies delta units of limit l under alg to st at nowUS, for a
// reservation decided at reservedUS (0 when unknown; see Settler and
// Settlement.ReservedAt for what that means per algorithm), and returns
// the state to store and how long to keep it; ttl 0 means the result is an
// absent key (remove it). changed is false when there was nothing to apply
// (a delta of 0, or a refund to a key that holds nothing of the
// reservation's): the store then leaves the key as it is. It reads no
// clock and never modifies *st; a nil st is an absent key. The settlement
// must be valid (see ValidateSettlement); otherwise Settle returns st
// unchanged, ttl 0 and changed false.
//
// Debt is bounded where exactness ends: a token bucket's scaled level
// stays at or above Burst×Per − 2^53, and a window's count (the sum of a
// sliding window's buckets, of a sliding log's entries) at or below 2^53.
func Settle(alg Algorithm, st *State, nowUS, reservedUS, delta int64, l Limit) (next State, ttl time.Duration, changed bool) {
	unchanged := func() (State, time.Duration, bool) {
		if st != nil {
			return *st, 0, false
		}
		return State{}, 0, false
	}
	if delta == 0 || ValidateSettlement(Settlement{Item: Item{Key: "-", Algorithm: alg, Limit: l}, Delta: delta}) != nil {
		return unchanged()
	}
	// The state as it stands at nowUS (refilled, old windows dropped).
	cur, r, _ := Apply(alg, st, nowUS, 0, l, false)
	if delta < 0 {
		// Nothing held (Remaining is whole units, so a token bucket
		// short of a fraction is not full): nothing to give back.
		if r.Remaining == r.Limit {
			return unchanged()
		}
		var gave bool
		if reservedUS > 0 {
			cur, gave = settleGiveAt(alg, cur, nowUS, min(reservedUS, nowUS), -delta, l)
		} else {
			cur, gave = settleGive(alg, cur, nowUS, -delta, l), true
		}
		if !gave {
			return unchanged()
		}
	} else {
		cur = settleTake(alg, cur, nowUS, delta, l)
	}
	next, _, ttl = Apply(alg, &cur, nowUS, 0, l, false)
	if alg == TokenBucket && next.Level >= l.Burst*next.Per {
		// A full bucket is an absent key; kept, it would read as full
		// of the old Per's units after a change of limit.
		return State{}, 0, true
	}
	return next, ttl, true
}

// settleGive returns u units to st, a state normalised to now by Apply,
// newest first (the reservation's time is unknown).
func settleGive(alg Algorithm, st State, now, u int64, l Limit) State {
	switch alg {
	case TokenBucket:
		capacity := l.Burst * st.Per
		st.Level = min(capacity, st.Level+u*st.Per)
	case FixedWindow:
		st.Count = max(0, st.Count-u)
	case SlidingWindow:
		if st.Per > 0 {
			st = refundSlidingWindow(&st, now, u, l)
		}
	case SlidingLog:
		st.Entries = refundLogEntries(st.Entries, u, func(LogEntry) bool { return true })
	}
	return st
}

// settleGiveAt returns u units to st, a state normalised to now by Apply,
// from what a reservation decided at at (<= now) charged: the window or
// bucket holding at, the log entries stamped at. gave is false when st
// holds none of them (they have left the window).
func settleGiveAt(alg Algorithm, st State, now, at, u int64, l Limit) (next State, gave bool) {
	switch alg {
	case FixedWindow:
		if w, _, _ := fixedGrid(at, l); st.Window != w || st.Count <= 0 {
			return st, false
		}
	case SlidingWindow:
		p, n := l.Per.Microseconds(), l.SlidingBuckets()
		c, k := slidingBuckets(&st, now, p, n)
		j := floorDiv(at, bucketLen(p, n)) - (k - n) // the reservation's bucket in c
		if j < 0 || j > n || c[j] <= 0 {
			return st, false
		}
		c[j] -= min(c[j], u)
		return slidingState(p, n, k, c), true
	case SlidingLog:
		if !slices.ContainsFunc(st.Entries, func(e LogEntry) bool { return e.At == at }) {
			return st, false
		}
		st.Entries = refundLogEntries(st.Entries, u, func(e LogEntry) bool { return e.At == at })
		return st, true
	}
	return settleGive(alg, st, now, u, l), true
}

// refundLogEntries returns a copy of es with u units taken off the
// entries that match, newest first, without the entries that reach zero.
func refundLogEntries(es []LogEntry, u int64, match func(LogEntry) bool) []LogEntry {
	out := make([]LogEntry, len(es))
	copy(out, es)
	for i := len(out) - 1; i >= 0 && u > 0; i-- {
		if match(out[i]) {
			t := min(out[i].Cost, u)
			out[i].Cost -= t
			u -= t
		}
	}
	kept := out[:0]
	for _, e := range out {
		if e.Cost > 0 {
			kept = append(kept, e)
		}
	}
	return kept
}

// settleTake charges u units to st, a state normalised to now by Apply,
// even past the limit.
func settleTake(alg Algorithm, st State, now, u int64, l Limit) State {
	switch alg {
	case TokenBucket:
		capacity := l.Burst * st.Per
		st.Level = max(st.Level-u*st.Per, capacity-maxExact)
	case FixedWindow:
		st.Count = min(st.Count+u, maxExact)
	case SlidingWindow:
		p, n := l.Per.Microseconds(), l.SlidingBuckets()
		c, k := slidingBuckets(&st, now, p, n)
		var sum int64
		for _, v := range c {
			sum += v
		}
		c[n] += min(u, maxExact-sum)
		st = slidingState(p, n, k, c)
	case SlidingLog:
		var used int64
		at := now
		for _, e := range st.Entries {
			used += e.Cost
			at = max(at, e.At)
		}
		if u = min(u, maxExact-used); u > 0 {
			es := make([]LogEntry, len(st.Entries), len(st.Entries)+1)
			copy(es, st.Entries)
			st.Entries = append(es, LogEntry{At: at, Cost: u})
			st.Per = l.Per.Microseconds()
		}
	}
	return st
}
