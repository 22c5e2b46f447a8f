package gcfloor

import (
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, min uint64
		base      int
		want      int
	}{
		{4 * mib, 64 * mib, 100, 1500},  // 4 MiB × 16 = 64 MiB
		{5 * mib, 64 * mib, 100, 1180},  // 1180 % of 5 MiB reaches 64 MiB, 1179 % does not
		{32 * mib, 64 * mib, 100, 100},  // the base already reaches the floor
		{40 * mib, 64 * mib, 100, 100},  // past it
		{64 * mib, 64 * mib, 200, 200},  // at the floor: the base
		{100 * mib, 64 * mib, 100, 100}, // above it
		{30 * mib, 64 * mib, 200, 200},  // a base of 200 reaches 90 MiB
		{0, 64 * mib, 100, maxPercent},  // nothing live
		{1, 1 << 62, 100, maxPercent},   // capped, no overflow
		{1 << 62, 1 << 63, 100, 100},    // no overflow at the top
		{mib, 64 * mib, -5, 6300},       // a negative base counts as 0
		{63 * mib, 64 * mib, 0, 2},      // rounded up: 1.6 % → 2
	} {
		got := Percent(c.live, c.min, c.base)
		if got != c.want {
			t.Errorf("Percent(%d, %d, %d) = %d, want %d", c.live, c.min, c.base, got, c.want)
		}
		if got < maxPercent && c.live > 0 && c.live < c.min {
			// The next cycle starts at the floor or later, and a percent one
			// lower would start it before the floor (unless it is the base).
			target := func(p int) uint64 { return c.live + c.live/100*uint64(p) + c.live%100*uint64(p)/100 }
			if target(got) < c.min {
				t.Errorf("Percent(%d, %d, %d) = %d starts the next cycle at %d, below the floor", c.live, c.min, c.base, got, target(got))
			}
			if got > c.base && got > 0 && target(got-1) >= c.min {
				t.Errorf("Percent(%d, %d, %d) = %d is not the least that reaches the floor", c.live, c.min, c.base, got)
			}
		}
	}
}

// TestTunerFollowsCollections: the tuner sets the percent after real
// collections, for the live heap each time, and stops when told.
func TestTunerFollowsCollections(t *testing.T) {
	const mib = 1 << 20
	var live atomic.Uint64
	sets := make(chan int, 16)
	tu := &tuner{min: 64 * mib, base: 100,
		set:  func(p int) { sets <- p },
		live: live.Load,
	}
	live.Store(4 * mib)
	tu.cycle() // as Start does
	if p := <-sets; p != 1500 {
		t.Fatalf("first percent %d, want 1500", p)
	}
	expect := func(bytes uint64, want int) {
		t.Helper()
		live.Store(bytes)
		deadline := time.After(10 * time.Second)
		for {
			runtime.GC()
			select {
			case p := <-sets:
				if p != want {
					t.Fatalf("after a collection with %d bytes live: percent %d, want %d", bytes, p, want)
				}
				return
			case <-deadline:
				proctest.FatalOverrun(t, "no percent set within 10s of collections")
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	expect(16*mib, 300)
	expect(48*mib, 100)
	tu.stopped.Store(true)
	runtime.GC() // a cycle under way when stopped still sees 48 MiB: no change
	live.Store(1 * mib)
	// A cycle after stop, as the last armed cleanup runs it, sets nothing
	// (1 MiB live would ask for 6300 %).
	tu.cycle()
	select {
	case p := <-sets:
		t.Errorf("percent %d set after stop", p)
	default:
	}
}

// TestStartAndStop: Start sets the percent for the heap live now, and stop
// puts the base back.
func TestStartAndStop(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	runtime.GC()
	stop := Start(1<<40, 100) // a floor no test heap reaches
	if p := debug.SetGCPercent(-1); p <= 100 {
		t.Errorf("percent after Start %d, want above the base 100", p)
	}
	debug.SetGCPercent(100)
	stop()
	if p := debug.SetGCPercent(100); p != 100 {
		t.Errorf("percent after stop %d, want 100", p)
	}
	stopNone := Start(0, 100)
	stopNone()
}
