package ratelimit

import (
	"math"
	"math/bits"
	"time"
)

// applyTokenBucket is Apply for TokenBucket. l must be valid.
//
// The level is kept as tokens × P (P = Per in µs), so a refill of R tokens
// per P microseconds adds exactly R per microsecond.
func applyTokenBucket(st *State, now, cost int64, l Limit, consume bool) (State, Result, time.Duration) {
	p := l.Per.Microseconds()
	r := l.Rate
	capacity := l.Burst * p
	level, stamp := tokenStart(st, p, capacity, now)

	// Refill. A clock that went backwards refills nothing and leaves the
	// stamp where it was, so the next forward step does not refill twice.
	elapsed := now - stamp
	if elapsed < 0 {
		elapsed = 0
	} else {
		stamp = now
	}
	// Compare before multiplying so that elapsed×R cannot overflow.
	if elapsed >= ceilDiv(capacity-level, r) {
		level = capacity
	} else {
		level += elapsed * r
	}

	need := cost * p
	res := Result{Allowed: level >= need, Limit: l.Burst}
	if res.Allowed && consume {
		level -= need
	} else if !res.Allowed {
		res.RetryAfter = micros(ceilDiv(need-level, r))
	}
	res.Remaining = clamp(level/p, 0, l.Burst)
	if level < 0 {
		res.Debt = ceilDiv(-level, p)
	}
	reset := ceilDiv(capacity-level, r)
	res.ResetAfter = micros(reset)

	// The bucket is full again reset µs after the stamp; a stamp ahead of
	// now (the clock went backwards) delays that.
	ttl := TTLMillis(reset + max(stamp-now, 0))
	ttl = max(ttl, time.Millisecond)
	return State{Per: p, Level: level, Stamp: stamp}, res, ttl
}

// refundTokenBucket is Refund for TokenBucket: it puts cost units back,
// never above the capacity, without refilling.
func refundTokenBucket(st *State, now, cost int64, l Limit) State {
	if absent(st) {
		return State{}
	}
	p := l.Per.Microseconds()
	capacity := l.Burst * p
	level, stamp := tokenStart(st, p, capacity, now)
	level = min(capacity, level+cost*p)
	return State{Per: p, Level: level, Stamp: stamp}
}

// tokenStart returns the level and stamp of st, converted to the scale of p
// when st was written with another Per (which forgives a debt). An absent
// key is a full bucket stamped now. A level in debt (below zero, see
// Settle) is kept, down to capacity − 2^53.
func tokenStart(st *State, p, capacity, now int64) (level, stamp int64) {
	if absent(st) {
		return capacity, now
	}
	level = max(st.Level, capacity-maxExact)
	if st.Per != p {
		level = clamp(mulDivFloor(max(level, 0), p, st.Per), 0, capacity)
	}
	return level, st.Stamp
}

// RefillTime returns how long a token bucket of limit l takes to refill
// units from the rate alone, as the store computes a wait: units × Per (in
// µs) / Rate, rounded up to the microsecond; 0 for units <= 0. ok is false
// when the time does not fit a Duration.
func RefillTime(units int64, l Limit) (d time.Duration, ok bool) {
	if units <= 0 {
		return 0, true
	}
	p := l.Per.Microseconds()
	if l.Rate <= 0 || p <= 0 {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(units), uint64(p))
	if hi != 0 || lo > math.MaxInt64-uint64(l.Rate) {
		return 0, false
	}
	us := ceilDiv(int64(lo), l.Rate)
	if us > math.MaxInt64/int64(time.Microsecond) {
		return 0, false
	}
	return time.Duration(us) * time.Microsecond, true
}
