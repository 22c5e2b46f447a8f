package ratelimit

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestValidateItem(t *testing.T) {
	tb := Limit{Rate: 5, Per: time.Second, Burst: 5}
	win := Limit{Rate: 5, Per: time.Second}
	// maxExact / 1e6 µs: the largest burst or rate whose scaled value fits
	// a Per of 1 s is 9007199254.
	const edge = maxExact / 1_000_000
	valid := []Item{
		{Key: "k", Algorithm: TokenBucket, Limit: tb, Cost: 5},
		{Key: "k", Algorithm: TokenBucket, Limit: tb},
		{Key: "k", Algorithm: FixedWindow, Limit: win, Cost: 5},
		{Key: "k", Algorithm: SlidingWindow, Limit: Limit{Rate: 1, Per: time.Microsecond}, Cost: 1},
		{Key: "k", Algorithm: SlidingLog, Limit: Limit{Rate: MaxSlidingLogRate, Per: time.Hour}, Cost: MaxSlidingLogRate},
		{Key: "k", Algorithm: TokenBucket, Limit: Limit{Rate: edge, Per: time.Second, Burst: edge}, Cost: 1},
		{Key: "k", Algorithm: FixedWindow, Limit: Limit{Rate: 1, Per: maxExact * time.Microsecond}, Cost: 1},
	}
	for _, it := range valid {
		if err := ValidateItem(it); err != nil {
			t.Errorf("ValidateItem(%+v) = %v, want nil", it, err)
		}
	}
	invalid := []struct {
		it   Item
		want string
	}{
		{Item{Algorithm: TokenBucket, Limit: tb}, "empty key"},
		{Item{Key: "k", Limit: tb}, "unknown Algorithm(0)"},
		{Item{Key: "k", Algorithm: 7, Limit: tb}, "unknown Algorithm(7)"},
		{Item{Key: "k", Algorithm: TokenBucket, Limit: win}, "burst: must be > 0"},
		{Item{Key: "k", Algorithm: SlidingWindow, Limit: tb}, "burst: does not apply"},
		{Item{Key: "k", Algorithm: FixedWindow, Limit: Limit{Per: time.Second}}, "rate: must be > 0"},
		{Item{Key: "k", Algorithm: FixedWindow, Limit: Limit{Rate: 1, Per: -time.Second}}, "per: must be > 0"},
		{Item{Key: "k", Algorithm: FixedWindow, Limit: Limit{Rate: 1, Per: 999 * time.Nanosecond}}, "whole number of microseconds"},
		{Item{Key: "k", Algorithm: TokenBucket, Limit: Limit{Rate: 1, Per: time.Second, Burst: edge + 1}}, "burst × per (9007199255 × 1000000µs) must be at most 2^53"},
		{Item{Key: "k", Algorithm: FixedWindow, Limit: Limit{Rate: edge + 1, Per: time.Second}}, "must be at most 2^53"},
		{Item{Key: "k", Algorithm: TokenBucket, Limit: Limit{Rate: edge + 1, Per: time.Second, Burst: 1}}, "must be at most 2^53"},
		{Item{Key: "k", Algorithm: FixedWindow, Limit: Limit{Rate: 2, Per: maxExact * time.Microsecond}}, "must be at most 2^53"},
		{Item{Key: "k", Algorithm: TokenBucket, Limit: Limit{Rate: 1, Per: math.MaxInt64, Burst: math.MaxInt64}}, "must be at most 2^53"},
		{Item{Key: "k", Algorithm: SlidingLog, Limit: Limit{Rate: MaxSlidingLogRate + 1, Per: time.Second}}, "must be at most 1000"},
		{Item{Key: "k", Algorithm: TokenBucket, Limit: tb, Cost: 6}, "cost 6 must be in [0, capacity 5]"},
		{Item{Key: "k", Algorithm: FixedWindow, Limit: win, Cost: -1}, "cost -1"},
	}
	for _, c := range invalid {
		c.it.Key = strings.Replace(c.it.Key, "k", "secret-tenant", 1)
		err := ValidateItem(c.it)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateItem(%+v) = %v, want ErrInvalid", c.it, err)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("ValidateItem(%+v) = %q, want it to mention %q", c.it, err, c.want)
		}
		if strings.Contains(err.Error(), "secret-tenant") {
			t.Errorf("error %q reveals the key", err)
		}
	}
}

// Apply and Refund never panic on items that validation rejects; Apply
// then denies and leaves the state alone.
func TestApplyInvalidItem(t *testing.T) {
	st := State{Per: 1_000_000, Level: 3, Stamp: 42}
	bad := []struct {
		alg  Algorithm
		l    Limit
		cost int64
	}{
		{0, Limit{Rate: 1, Per: time.Second}, 1},
		{TokenBucket, Limit{Rate: 1, Per: 0, Burst: 1}, 1},
		{FixedWindow, Limit{Rate: 0, Per: time.Second}, 0},
		{SlidingWindow, Limit{Rate: 2, Per: time.Second}, 3},
		{SlidingLog, Limit{Rate: 2, Per: time.Second}, -1},
	}
	for _, b := range bad {
		next, r, ttl := Apply(b.alg, &st, baseUS, b.cost, b.l, true)
		if r.Allowed || ttl != 0 || next.Per != st.Per || next.Level != st.Level || next.Stamp != st.Stamp {
			t.Errorf("Apply(%v, %+v, cost %d) = %+v, %+v, %v; want a denial leaving the state", b.alg, b.l, b.cost, next, r, ttl)
		}
		if next, r, _ := Apply(b.alg, nil, baseUS, b.cost, b.l, true); r.Allowed || next.Per != 0 {
			t.Errorf("Apply(%v, nil) = %+v, %+v; want a denial and the zero state", b.alg, next, r)
		}
		if back := Refund(b.alg, &st, baseUS, b.cost, b.l); back.Level != st.Level || back.Per != st.Per {
			t.Errorf("Refund(%v) = %+v, want the state unchanged", b.alg, back)
		}
	}
}

func TestCapacity(t *testing.T) {
	l := Limit{Rate: 3, Per: time.Second, Burst: 7}
	for alg, want := range map[Algorithm]int64{TokenBucket: 7, FixedWindow: 3, SlidingWindow: 3, SlidingLog: 3, 0: 0, 9: 0} {
		if got := Capacity(alg, l); got != want {
			t.Errorf("Capacity(%v) = %d, want %d", alg, got, want)
		}
	}
}

func TestIntegerHelpers(t *testing.T) {
	for _, c := range []struct{ a, b, floor, ceil int64 }{
		{7, 2, 3, 4}, {-7, 2, -4, -3}, {6, 3, 2, 2}, {-6, 3, -2, -2}, {0, 5, 0, 0}, {-1, 5, -1, 0}, {1, 5, 0, 1},
	} {
		if got := floorDiv(c.a, c.b); got != c.floor {
			t.Errorf("floorDiv(%d, %d) = %d, want %d", c.a, c.b, got, c.floor)
		}
		if got := ceilDiv(c.a, c.b); got != c.ceil {
			t.Errorf("ceilDiv(%d, %d) = %d, want %d", c.a, c.b, got, c.ceil)
		}
	}
	if got := mulDivFloor(maxExact, maxExact-1, maxExact); got != maxExact-1 {
		t.Errorf("mulDivFloor without overflow: %d", got)
	}
	if got := mulDivFloor(math.MaxInt64, 4, 2); got != math.MaxInt64 {
		t.Errorf("mulDivFloor saturates: %d", got)
	}
	if got := micros(math.MaxInt64 / 10); got != math.MaxInt64 {
		t.Errorf("micros saturates: %d", got)
	}
	for us, want := range map[int64]time.Duration{0: 0, -5: 0, 1: time.Millisecond, 1000: time.Millisecond, 1001: 2 * time.Millisecond} {
		if got := TTLMillis(us); got != want {
			t.Errorf("ttlMillis(%d) = %v, want %v", us, got, want)
		}
	}
}

// Every algorithm and on-error mode reads back from its configuration name;
// other names, and the zero values, are refused.
func TestConfigNamesRoundTrip(t *testing.T) {
	for _, a := range []Algorithm{TokenBucket, FixedWindow, SlidingWindow, SlidingLog} {
		b, err := a.MarshalText()
		var got Algorithm
		if err != nil || got.UnmarshalText(b) != nil || got != a {
			t.Errorf("algorithm %v: marshal %q, %v; read back %v", a, b, err, got)
		}
	}
	for _, m := range []OnError{OnErrorOpen, OnErrorClosed, OnErrorLocal} {
		b, err := m.MarshalText()
		var got OnError
		if err != nil || got.UnmarshalText(b) != nil || got != m {
			t.Errorf("on_store_error %v: marshal %q, %v; read back %v", m, b, err, got)
		}
	}
	for _, bad := range []string{"", "Token_Bucket", "leaky_bucket"} {
		if a, err := ParseAlgorithm(bad); err == nil {
			t.Errorf("ParseAlgorithm(%q) = %v, want an error", bad, a)
		}
		if m, err := ParseOnError(bad); err == nil {
			t.Errorf("ParseOnError(%q) = %v, want an error", bad, m)
		}
	}
	if _, err := Algorithm(0).MarshalText(); err == nil {
		t.Error("the zero Algorithm marshals")
	}
	if _, err := OnError(0).MarshalText(); err == nil {
		t.Error("the zero OnError marshals")
	}
}
