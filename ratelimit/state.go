package ratelimit

import (
	"math"
	"math/bits"
	"time"
)

// State is the stored state of one key under one algorithm. It holds
// integers only (microseconds and units), so that any store, including one
// whose scripts compute in IEEE doubles, represents it exactly.
//
// The zero State, like a nil *State passed to Apply, is an absent key, which
// is exactly a key at full capacity. Which fields are meaningful depends on
// the algorithm:
//
//   - TokenBucket: Level and Stamp.
//   - FixedWindow: Window and Count.
//   - SlidingWindow: Buckets, Window (the newest bucket) and Slots.
//   - SlidingLog: Entries.
//   - Concurrency: Holds.
//
// Per is meaningful for all of them.
type State struct {
	// Per is the Limit.Per, in microseconds, that the state was written
	// with, so that a later Apply with another Per does not misread the
	// state: a token bucket's level is rescaled (rounded down), window
	// counts start afresh (their window numbers belong to another grid), and
	// a sliding log is kept (its times are absolute). Per <= 0 marks an
	// absent key.
	Per int64
	// Level is the token bucket's content in units × Per (a scaled integer,
	// so that fractions of a unit are kept exactly), in [0, Burst×Per], or
	// below 0 when a settlement charged more than the bucket held (debt,
	// see Settle), but never below Burst×Per − 2^53.
	Level int64
	// Stamp is the Unix time in microseconds up to which Level has been
	// refilled.
	Stamp int64
	// Window is the index of the current window: the Unix time in
	// microseconds divided by Per (for a sliding window, by its bucket
	// length), rounded down.
	Window int64
	// Count is the number of units admitted in window Window.
	Count int64
	// Buckets is the number of buckets N of the sliding window the state
	// was written with (sliding window only); like Per, another N starts
	// afresh.
	Buckets int64
	// Slots are a sliding window's counts of the buckets ending at Window,
	// oldest first: Slots[i] counts bucket Window-len(Slots)+1+i. Apply
	// never modifies the Slots of the State it is given.
	Slots []int64
	// Entries are the sliding log's admissions still inside the window,
	// oldest first. Apply never modifies the Entries of the State it is given;
	// the State it returns may share their backing array.
	Entries []LogEntry
	// Holds are a concurrency key's slots, in the order they were taken.
	// Apply never modifies the Holds of the State it is given, and drops
	// the expired ones from the State it returns.
	Holds []Hold
}

// Hold is one concurrency slot recorded by a Concurrency state.
type Hold struct {
	// Holder is the Item.Holder that took the slot.
	Holder string
	// Expires is the Unix time in µs from which the slot is free, unless
	// it is renewed before.
	Expires int64
}

// LogEntry is one admission recorded by a SlidingLog state.
type LogEntry struct {
	// At is the Unix time of the admission in microseconds.
	At int64
	// Cost is the number of units admitted, > 0.
	Cost int64
}

// maxExact is the largest integer up to which every integer is exactly
// representable as an IEEE double. Validation keeps every scaled quantity of
// the algorithms at or below it.
const maxExact = 1 << 53

// floorDiv returns a/b rounded towards negative infinity; b must be > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// ceilDiv returns a/b rounded towards positive infinity; b must be > 0.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a > 0 {
		q++
	}
	return q
}

// mulDivFloor returns floor(a×b/c) for a, b >= 0 and c > 0 without
// intermediate overflow, saturating at math.MaxInt64.
func mulDivFloor(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// clamp returns v limited to [lo, hi].
func clamp(v, lo, hi int64) int64 {
	return max(lo, min(v, hi))
}

// micros converts a number of microseconds to a Duration, saturating
// instead of overflowing.
func micros(us int64) time.Duration {
	if us > math.MaxInt64/int64(time.Microsecond) {
		return math.MaxInt64
	}
	return time.Duration(us) * time.Microsecond
}

// ttlMillis rounds a number of microseconds up to whole milliseconds, as a
// key expiry (PEXPIRE) needs. It returns 0 for us <= 0.
func TTLMillis(us int64) time.Duration {
	if us <= 0 {
		return 0
	}
	return micros(ceilDiv(us, 1000) * 1000)
}

// absent reports whether st stands for an absent key.
func absent(st *State) bool {
	return st == nil || st.Per <= 0
}
