package ratelimit

import (
	"fmt"
	"time"
)

// Apply evaluates, and when consume is true takes, cost units of limit l
// under algorithm alg from the state st at Unix time nowUS (microseconds).
// A nil st, or one whose Per is <= 0, is an absent key: a key at full
// capacity.
//
// It implements the arithmetic shared with the Redis scripts (integer
// microseconds and units only) and reads no clock. It never modifies *st.
//
// The returned Result describes the key after the call: r.Allowed reports
// whether cost fits now; the cost is taken only when it fits, consume is
// true and cost > 0 (r.Remaining and r.ResetAfter then count it). A cost of
// 0 evaluates without taking anything.
//
// next is the state to store. ttl is how long the store must keep next
// (rounded up to whole milliseconds, as a key expiry needs): from nowUS +
// ttl on, next behaves exactly like an absent key, so a store may expire it
// then. ttl is 0 when next already behaves like an absent key (a window
// algorithm with nothing counted), and at least 1 ms for a token bucket.
//
// The item (alg, l, cost) must be valid (see ValidateItem). For an invalid
// one Apply takes nothing: it returns st unchanged (the zero State for nil)
// with a Result that does not allow and a ttl of 0.
func Apply(alg Algorithm, st *State, nowUS int64, cost int64, l Limit, consume bool) (next State, r Result, ttl time.Duration) {
	if checkItem(alg, l, cost) != nil {
		if st != nil {
			next = *st
		}
		return next, Result{Limit: Capacity(alg, l)}, 0
	}
	switch alg {
	case TokenBucket:
		return applyTokenBucket(st, nowUS, cost, l, consume)
	case FixedWindow:
		return applyFixedWindow(st, nowUS, cost, l, consume)
	case SlidingWindow:
		return applySlidingWindow(st, nowUS, cost, l, consume)
	default:
		return applySlidingLog(st, nowUS, cost, l, consume)
	}
}

// Refund gives back cost units that an earlier Apply at about nowUS took
// from st, and returns the state to store. It is for a store that decides a
// batch in several atomic steps and must undo a step that was admitted when a
// later one denied.
//
// A token bucket gets cost units back, never above its capacity; a fixed
// window loses cost from its count if the window is still the current one; a
// sliding window loses it from the current window's count, or from the
// previous window's count if the window has just turned; a sliding log loses
// its newest entry of exactly that cost. A refund never makes a key live
// longer, so the store keeps the key's current expiry.
//
// A nil st (or one with Per <= 0) is an absent key, which is already full:
// Refund then returns the zero State and the store should leave the key
// absent. An invalid item (see ValidateItem) returns st unchanged.
func Refund(alg Algorithm, st *State, nowUS int64, cost int64, l Limit) State {
	if absent(st) {
		return State{}
	}
	if checkItem(alg, l, cost) != nil {
		return *st
	}
	switch alg {
	case TokenBucket:
		return refundTokenBucket(st, nowUS, cost, l)
	case FixedWindow:
		return refundFixedWindow(st, nowUS, cost, l)
	case SlidingWindow:
		return refundSlidingWindow(st, nowUS, cost, l)
	default:
		return refundSlidingLog(st, cost, l)
	}
}

// Capacity returns the capacity of l under alg in units: Burst for a token
// bucket, Rate for the window algorithms (0 for an unknown algorithm).
func Capacity(alg Algorithm, l Limit) int64 {
	switch alg {
	case TokenBucket:
		return l.Burst
	case FixedWindow, SlidingWindow, SlidingLog:
		return l.Rate
	}
	return 0
}

// ValidateItem reports whether it can be decided. The error wraps
// ErrInvalid and names the rule broken; it never contains the key. The rules:
//
//   - Key is not empty; Algorithm is one of the defined ones.
//   - Rate > 0 and Per >= 1µs (Per is used in whole microseconds, P).
//   - TokenBucket has Burst > 0; the window algorithms have Burst == 0.
//   - 0 <= Cost <= capacity (see Capacity).
//   - Burst×P and Rate×P are at most 2^53, so that the scaled integers of
//     the algorithms are exact in IEEE doubles too.
//   - SlidingLog has Rate <= MaxSlidingLogRate.
func ValidateItem(it Item) error {
	if it.Key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalid)
	}
	return checkItem(it.Algorithm, it.Limit, it.Cost)
}

// checkItem is ValidateItem without the key.
func checkItem(alg Algorithm, l Limit, cost int64) error {
	switch alg {
	case TokenBucket:
		if l.Burst <= 0 {
			return fmt.Errorf("%w: %s: burst %d must be > 0", ErrInvalid, alg, l.Burst)
		}
	case FixedWindow, SlidingWindow, SlidingLog:
		if l.Burst != 0 {
			return fmt.Errorf("%w: %s: burst %d must be 0 (it applies to token_bucket only)", ErrInvalid, alg, l.Burst)
		}
	default:
		return fmt.Errorf("%w: unknown %s", ErrInvalid, alg)
	}
	if l.Rate <= 0 {
		return fmt.Errorf("%w: %s: rate %d must be > 0", ErrInvalid, alg, l.Rate)
	}
	p := l.Per.Microseconds()
	if p <= 0 {
		return fmt.Errorf("%w: %s: per %s must be at least 1µs", ErrInvalid, alg, l.Per)
	}
	if l.Rate > maxExact/p {
		return fmt.Errorf("%w: %s: rate %d × per %dµs exceeds 2^53", ErrInvalid, alg, l.Rate, p)
	}
	if l.Burst > maxExact/p {
		return fmt.Errorf("%w: %s: burst %d × per %dµs exceeds 2^53", ErrInvalid, alg, l.Burst, p)
	}
	if alg == SlidingLog && l.Rate > MaxSlidingLogRate {
		return fmt.Errorf("%w: %s: rate %d exceeds %d", ErrInvalid, alg, l.Rate, MaxSlidingLogRate)
	}
	if c := Capacity(alg, l); cost < 0 || cost > c {
		return fmt.Errorf("%w: %s: cost %d must be in [0, capacity %d]", ErrInvalid, alg, cost, c)
	}
	return nil
}
