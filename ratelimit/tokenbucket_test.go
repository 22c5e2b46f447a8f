package ratelimit

import (
	"math"
	"testing"
	"time"
)

func TestTokenBucketPerChangeRescales(t *testing.T) {
	// 2.5 tokens written with Per 1 s; read with Per 2 s they are still
	// 2.5 tokens, now scaled by 2e6.
	st := State{Per: 1_000_000, Level: 2_500_000, Stamp: baseUS}
	l := Limit{Rate: 1, Per: 2 * time.Second, Burst: 4}
	next, r, _ := Apply(TokenBucket, &st, baseUS, 0, l, false)
	if next.Per != 2_000_000 || next.Level != 5_000_000 || r.Remaining != 2 {
		t.Fatalf("rescaled: %+v %+v, want level 5e6 at Per 2e6, 2 remaining", next, r)
	}
	// A smaller burst clamps the rescaled level.
	l.Burst = 1
	if next, r, _ := Apply(TokenBucket, &st, baseUS, 0, l, false); next.Level != 2_000_000 || r.Remaining != 1 {
		t.Fatalf("clamped: %+v %+v, want level 2e6, 1 remaining", next, r)
	}
	// Rounding down: 1 µs-token at Per 3 µs is 1/3 µs-token at Per 1 µs.
	small := State{Per: 3, Level: 1, Stamp: baseUS}
	if next, _, _ := Apply(TokenBucket, &small, baseUS, 0, Limit{Rate: 1, Per: time.Microsecond, Burst: 1}, false); next.Level != 0 {
		t.Fatalf("rescale rounds down: level %d, want 0", next.Level)
	}
}

func TestTokenBucketTTL(t *testing.T) {
	l := Limit{Rate: 3, Per: time.Second, Burst: 2} // one token per 333333.3 µs
	cases := []struct {
		name string
		st   *State
		now  int64
		cost int64
		want time.Duration
	}{
		{"full bucket", nil, baseUS, 0, time.Millisecond},
		{"one token taken", nil, baseUS, 1, 334 * time.Millisecond},   // 333334 µs, rounded up
		{"both tokens taken", nil, baseUS, 2, 667 * time.Millisecond}, // 666667 µs
		// The clock went back 10 ms: the bucket refills from its stamp, so
		// the key must live 10 ms longer.
		{"stamp ahead", &State{Per: 1_000_000, Level: 0, Stamp: baseUS + 10_000}, baseUS, 0, 677 * time.Millisecond},
	}
	for _, c := range cases {
		if _, _, ttl := Apply(TokenBucket, c.st, c.now, c.cost, l, true); ttl != c.want {
			t.Errorf("%s: ttl %v, want %v", c.name, ttl, c.want)
		}
	}
}

func TestTokenBucketRefund(t *testing.T) {
	l := Limit{Rate: 1, Per: time.Second, Burst: 3}
	st := State{Per: 1_000_000, Level: 500_000, Stamp: baseUS}
	if got := Refund(TokenBucket, &st, baseUS+10, 2, l); got.Level != 2_500_000 || got.Stamp != baseUS {
		t.Errorf("refund 2: %+v, want level 2.5e6 and the stamp kept", got)
	}
	if got := Refund(TokenBucket, &st, baseUS, 3, l); got.Level != 3_000_000 {
		t.Errorf("refund past capacity: level %d, want 3e6", got.Level)
	}
	if got := Refund(TokenBucket, nil, baseUS, 3, l); got.Per != 0 {
		t.Errorf("refund to an absent key: %+v, want the zero State", got)
	}
}

// elapsed×Rate would overflow int64 after a long idle; the refill compares
// first.
func TestTokenBucketLongIdleNoOverflow(t *testing.T) {
	const big = maxExact / 1_000_000
	l := Limit{Rate: big, Per: time.Second, Burst: big}
	st := State{Per: 1_000_000, Level: 0, Stamp: 0}
	if _, r, _ := Apply(TokenBucket, &st, 1<<62, 0, l, false); r.Remaining != big || r.ResetAfter != 0 {
		t.Fatalf("after a very long idle: %+v, want full", r)
	}
}

func TestRefillTime(t *testing.T) {
	l := Limit{Rate: 3, Per: time.Second, Burst: 10}
	for _, c := range []struct {
		units int64
		want  time.Duration
		ok    bool
	}{
		{0, 0, true}, {-1, 0, true}, {3, time.Second, true}, {1, 333334 * time.Microsecond, true},
		{math.MaxInt64 / 1000, 0, false}, // units × Per in µs overflows
	} {
		got, ok := RefillTime(c.units, l)
		if got != c.want || ok != c.ok {
			t.Errorf("RefillTime(%d) = %v, %v; want %v, %v", c.units, got, ok, c.want, c.ok)
		}
	}
}
