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
