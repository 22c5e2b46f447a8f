// Package gcfloor keeps Go's garbage collector from running while the heap
// is small. With GOGC's default of 100 the collector starts a cycle each
// time the heap grows by as much as is live after the last one; a gateway
// keeps little alive (a few MiB) and allocates a little for every request,
// so it would collect every few hundred requests, and each cycle has a cost
// that does not shrink with the heap (the roots, every goroutine's stack).
// A floor lets the heap grow to a fixed size before a cycle starts, which
// costs that much memory and saves most of the collector's work; once the
// live heap is large enough, the GC percent is left at its base and the
// floor costs nothing.
package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// maxPercent bounds the GC percent a floor sets, however small the live
// heap (a value that large already puts the next cycle at the floor for
// any live heap above min/1000).
const maxPercent = 100_000

// Percent returns the GC percent that starts the next cycle when the heap
// reaches the larger of min bytes and live×(1+base/100): base when that
// is already at least min, otherwise the percent by which min exceeds
// live, rounded up, at most maxPercent. A live heap of 0 counts as 1 byte.
func Percent(live, min uint64, base int) int {
	if live == 0 {
		live = 1
	}
	if base < 0 {
		base = 0
	}
	if live >= min || live+live/100*uint64(base)+live%100*uint64(base)/100 >= min {
		return base
	}
	p := (min - live) / live * 100
	p += ((min-live)%live*100 + live - 1) / live // rounded up
	if p > maxPercent {
		return maxPercent
	}
	if int(p) < base {
		return base
	}
	return int(p)
}

// tuner sets the GC percent after each collection.
type tuner struct {
	min     uint64
	base    int
	set     func(percent int) // debug.SetGCPercent
	live    func() uint64     // the live heap after the last cycle, in bytes
	last    int               // the percent set last; 0 = none yet
	stopped atomic.Bool
}

// sentinel is the object whose cleanup runs after each collection; it
// holds a pointer so that it is never one of the tiny allocations that
// share a block.
type sentinel struct{ _ *int }

// arm makes the next collection run cycle.
func (t *tuner) arm() {
	runtime.AddCleanup(&sentinel{}, func(t *tuner) { t.cycle() }, t)
}

// cycle runs after a collection: it sets the percent for the next one and
// arms itself again, until stopped.
func (t *tuner) cycle() {
	if t.stopped.Load() {
		return
	}
	if p := Percent(t.live(), t.min, t.base); p != t.last {
		t.set(p)
		t.last = p
	}
	t.arm()
}

// Start keeps the heap target at min bytes or more: after each collection
// the GC percent is set by Percent for the live heap then, with base as
// the percent for a heap past the floor (GOGC's value; 100 by default).
// It sets the percent at once, for the heap live now. The returned stop
// ends the tuning and puts the percent back to base. A min of 0 or less
// does nothing. A memory limit (GOMEMLIMIT, debug.SetMemoryLimit) still
// applies: the collector runs when the heap nears it, floor or not.
func Start(min int64, base int) (stop func()) {
	if min <= 0 {
		return func() {}
	}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	t := &tuner{
		min:  uint64(min),
		base: base,
		set:  func(p int) { debug.SetGCPercent(p) },
		live: func() uint64 {
			metrics.Read(sample)
			if sample[0].Value.Kind() != metrics.KindUint64 {
				return 0
			}
			return sample[0].Value.Uint64()
		},
	}
	t.cycle()
	return func() {
		if !t.stopped.Swap(true) {
			debug.SetGCPercent(base)
		}
	}
}
