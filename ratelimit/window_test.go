package ratelimit

import (
	"testing"
	"time"
)

// now at 3.5 s into window 170000000 of 10 s.
const winNow = baseUS + 3_500_000

var win10 = Limit{Rate: 4, Per: 10 * time.Second}

func TestFixedWindowStateAndTTL(t *testing.T) {
	next, r, ttl := Apply(FixedWindow, nil, winNow, 3, win10, true)
	want := State{Per: 10_000_000, Window: baseUS / 10_000_000, Count: 3}
	if next.Per != want.Per || next.Window != want.Window || next.Count != want.Count {
		t.Fatalf("state %+v, want %+v", next, want)
	}
	if ttl != 6500*time.Millisecond || r.ResetAfter != 6500*time.Millisecond {
		t.Fatalf("ttl %v, reset %v; want both 6.5s", ttl, r.ResetAfter)
	}
	// Nothing counted: nothing to keep.
	if _, _, ttl := Apply(FixedWindow, nil, winNow, 0, win10, true); ttl != 0 {
		t.Fatalf("ttl of an empty window %v, want 0", ttl)
	}
	// Another Per: the stored count belongs to another grid and is dropped.
	other := next
	other.Per = 5_000_000
	if _, r, _ := Apply(FixedWindow, &other, winNow, 0, win10, false); r.Remaining != 4 {
		t.Fatalf("state of another Per: remaining %d, want 4 (a fresh window)", r.Remaining)
	}
}

func TestFixedWindowRefund(t *testing.T) {
	st := State{Per: 10_000_000, Window: baseUS / 10_000_000, Count: 3}
	cases := []struct {
		name string
		now  int64
		cost int64
		want int64
	}{
		{"same window", winNow, 2, 1},
		{"more than counted", winNow, 4, 0},
		{"clock went back", winNow - 10_000_000, 2, 1},
		{"window over", winNow + 10_000_000, 2, 3},
	}
	for _, c := range cases {
		if got := Refund(FixedWindow, &st, c.now, c.cost, win10); got.Count != c.want || got.Window != st.Window {
			t.Errorf("%s: %+v, want count %d in the stored window", c.name, got, c.want)
		}
	}
}

func TestSlidingWindowTTLAndClockBack(t *testing.T) {
	// 3.5 s into a window: both counts are gone 2 windows after its start.
	_, _, ttl := Apply(SlidingWindow, nil, winNow, 1, win10, true)
	if ttl != 16500*time.Millisecond {
		t.Fatalf("ttl %v, want 16.5s", ttl)
	}
	// The clock went back into the previous window: the state is read at
	// the start of the stored window, and the key must outlive its end.
	st := State{Per: 10_000_000, Window: baseUS/10_000_000 + 1, Count: 2, Prev: 2}
	_, r, ttl := Apply(SlidingWindow, &st, winNow, 1, win10, true)
	if r.Remaining != 0 || r.ResetAfter != 20*time.Second || ttl != 26500*time.Millisecond {
		t.Fatalf("clock back: %+v ttl %v; want 0 remaining, reset 20s (from the stored window's start), ttl 26.5s", r, ttl)
	}
}

func TestSlidingWindowRefund(t *testing.T) {
	w := int64(baseUS / 10_000_000)
	st := State{Per: 10_000_000, Window: w, Count: 3, Prev: 2}
	cases := []struct {
		name             string
		now              int64
		window, cur, prv int64
	}{
		{"same window", winNow, w, 1, 2},
		{"clock went back", winNow - 10_000_000, w, 1, 2},
		{"next window", winNow + 10_000_000, w + 1, 0, 1},
		{"two windows on", winNow + 20_000_000, w + 2, 0, 0},
	}
	for _, c := range cases {
		got := Refund(SlidingWindow, &st, c.now, 2, win10)
		if got.Window != c.window || got.Count != c.cur || got.Prev != c.prv {
			t.Errorf("%s: %+v, want window %d cur %d prev %d", c.name, got, c.window, c.cur, c.prv)
		}
	}
}
