package e2e

import (
	"slices"
	"sort"
	"strings"
	"time"
)

// The chaos checker's rule for a cross-region quota (the regions
// topology): the partition bound of docs/concepts/regions.md.

// safeWindow is a time in [From, To] when Region (-1: every region) may
// be on its safe share, because of Class.
type safeWindow struct {
	Region   int
	From, To time.Time
	Class    string
}

// safeAllowance is the partition bound of docs/concepts/regions.md for a
// cross-region token bucket, whichever region admitted: an interval gets,
// for each region that may be on its safe share for a time τ of it,
// safe × (burst + rate × τ): what its safe share admits meanwhile, which
// the owner does not count. Without one the bound is the connected one,
// burst + rate × T.
func safeAllowance(safe []safeWindow, l chaosLimit) func(a, b time.Time) (int64, string) {
	return func(a, b time.Time) (int64, string) {
		taus, class := onSafeShare(safe, a, b)
		allow := 0.0
		for _, tau := range taus {
			allow += l.Safe * (float64(l.Burst) + l.Rate*tau.Seconds())
		}
		return int64(allow + 0.999999), class
	}
}

// onSafeShare returns, for each region that may be on its safe share at
// some time in [a, b], how long of [a, b] (its windows' union; a window of
// region -1 is every region's), and the classes of those windows ("none"
// when there are none).
func onSafeShare(safe []safeWindow, a, b time.Time) (map[int]time.Duration, string) {
	spans := map[int][][2]time.Time{}
	var names []string
	for _, w := range safe {
		if a.After(w.To) || b.Before(w.From) {
			continue
		}
		from, to := maxTime(w.From, a), minTime(w.To, b)
		for r := range chaosRegionCount {
			if w.Region < 0 || w.Region == r {
				spans[r] = append(spans[r], [2]time.Time{from, to})
			}
		}
		if !slices.Contains(names, w.Class) {
			names = append(names, w.Class)
		}
	}
	if len(names) == 0 {
		return nil, "none"
	}
	sort.Strings(names)
	out := map[int]time.Duration{}
	for r, ss := range spans {
		sort.Slice(ss, func(i, j int) bool { return ss[i][0].Before(ss[j][0]) })
		var total time.Duration
		cur := ss[0]
		for _, x := range ss[1:] {
			if x[0].After(cur[1]) {
				total += cur[1].Sub(cur[0])
				cur = x
			} else if x[1].After(cur[1]) {
				cur[1] = x[1]
			}
		}
		out[r] = total + cur[1].Sub(cur[0])
	}
	return out, strings.Join(names, "+")
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
