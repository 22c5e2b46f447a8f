package e2e

import (
	"strings"
	"testing"
	"time"
)

// exactBucket returns the admissions of a bucket of burst and rate per
// second kept exactly at its bound for d: the burst at t0, then one unit
// each 1/rate.
func exactBucket(t0 time.Time, tenant, route string, burst int64, rate float64, d time.Duration) []chaosAdmit {
	var out []chaosAdmit
	for range burst {
		out = append(out, chaosAdmit{Tenant: tenant, Route: route, At: t0, End: t0, Cost: 1})
	}
	step := time.Duration(float64(time.Second) / rate)
	for at := t0.Add(step); at.Sub(t0) <= d; at = at.Add(step) {
		out = append(out, chaosAdmit{Tenant: tenant, Route: route, At: at, End: at, Cost: 1})
	}
	return out
}

// TestChaosCheckerCatchesPlantedOverAdmission: the checker passes a
// record kept exactly at a token bucket's bound, and fails the same record
// with one extra admission per second planted in it (as a gateway that
// admits one request a second too many would leave), naming the key, with
// the units over counted; the same extra admissions spanning a promotion
// that may lose writes pass within its one-burst allowance only while they
// fit it.
func TestChaosCheckerCatchesPlantedOverAdmission(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lim := []chaosLimit{{Route: "tb", Kind: "bucket", Burst: 10, Rate: 5}}
	base := chaosInput{Limits: lim, RangeOf: map[string]int{"a": 0}, Jitter: 50 * time.Millisecond}

	exact := base
	exact.Admits = exactBucket(t0, "a", "tb", 10, 5, 10*time.Second)
	if f := check(exact).failed(); len(f) > 0 {
		t.Fatalf("a record at the bound failed: %v", f)
	}

	planted := base
	planted.Admits = exactBucket(t0, "a", "tb", 10, 5, 10*time.Second)
	for s := 1; s <= 10; s++ {
		at := t0.Add(time.Duration(s)*time.Second - 100*time.Millisecond)
		planted.Admits = append(planted.Admits, chaosAdmit{Tenant: "a", Route: "tb", At: at, End: at, Cost: 1})
	}
	r := check(planted)
	f := r.failed()
	if len(f) != 1 || !strings.Contains(f[0], "a tb (bucket)") {
		t.Fatalf("one extra admission a second: failures %v, want one naming key a/tb", f)
	}
	// Ten extra units, less the slack of 2 × 50 ms jitter at 5/s (1 unit).
	if k := r.Keys[0]; k.Over < 8 || k.Over > 10 || k.RawClass != "none" {
		t.Errorf("planted 10 extra units: over %d (class %s), want 9 or so in class none", k.Over, k.RawClass)
	}

	// A promotion that loses writes at 5 s allows one burst (10) for
	// intervals spanning it: 10 extra units planted right after it pass,
	// 11 fail.
	for _, tc := range []struct {
		extra int
		fail  bool
	}{{10, false}, {12, true}} {
		in := base
		in.Admits = exactBucket(t0, "a", "tb", 10, 5, 10*time.Second)
		p := t0.Add(5 * time.Second)
		in.Faults = []chaosFault{{Class: "failover-force", Range: 0, Start: p, End: p.Add(100 * time.Millisecond), LosesWrites: true}}
		for range tc.extra {
			at := p.Add(150 * time.Millisecond)
			in.Admits = append(in.Admits, chaosAdmit{Tenant: "a", Route: "tb", At: at, End: at, Cost: 1})
		}
		r := check(in)
		if got := len(r.failed()) > 0; got != tc.fail {
			t.Errorf("%d extra after a lossy promotion: failed=%v (%v), want %v", tc.extra, got, r.failed(), tc.fail)
		}
		if r.Keys[0].RawClass != "failover-force" {
			t.Errorf("%d extra after a lossy promotion: excess put in class %q", tc.extra, r.Keys[0].RawClass)
		}
		// A promotion on another range allows nothing here.
		in.Faults[0].Range = 1
		if len(check(in).failed()) == 0 {
			t.Errorf("%d extra after a promotion on another range passed", tc.extra)
		}
	}
}

// TestChaosCheckerConcurrency: max requests in flight at once pass; one
// more fails; a request whose client left and that the upstream let go
// within the slack does not count.
func TestChaosCheckerConcurrency(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	in := chaosInput{Limits: []chaosLimit{{Route: "cc", Kind: "concurrency", Max: 2}}, CancelSlack: 50 * time.Millisecond}
	in.Admits = []chaosAdmit{
		{Tenant: "a", Route: "cc", At: ms(0), End: ms(100)},
		{Tenant: "a", Route: "cc", At: ms(10), End: ms(60), Cancelled: true},
		{Tenant: "a", Route: "cc", At: ms(30), End: ms(130)}, // the cancelled one ended 30 ms later: released
		{Tenant: "a", Route: "cc", At: ms(100), End: ms(200)},
	}
	if f := check(in).failed(); len(f) > 0 {
		t.Fatalf("2 in flight: %v", f)
	}
	in.Admits = append(in.Admits, chaosAdmit{Tenant: "a", Route: "cc", At: ms(120), End: ms(150)})
	r := check(in)
	if len(r.failed()) != 1 || r.Keys[0].PeakInFlight != 3 || r.Keys[0].Over != 1 {
		t.Errorf("3 in flight: failures %v, peak %d, over %d; want one failure, peak 3, over 1", r.failed(), r.Keys[0].PeakInFlight, r.Keys[0].Over)
	}
}

// TestChaosCheckerAnswers: a call without an answer fails unless a
// gateway kill cut it; a status the routes never give fails; a late
// answer is counted apart and fails nothing.
func TestChaosCheckerAnswers(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	in := chaosInput{Deadline: time.Second, Calls: []chaosCall{
		{Start: t0, End: t0.Add(time.Millisecond), Status: 200},
		{Start: t0, End: t0.Add(2 * time.Second), Status: 429},
		{Start: t0, Err: "connection reset", Cut: true},
	}}
	r := check(in)
	if len(r.failed()) > 0 || r.Late != 1 || r.Cut != 1 {
		t.Fatalf("late and cut calls: failures %v, late %d, cut %d; want none, 1, 1", r.failed(), r.Late, r.Cut)
	}
	in.Calls = append(in.Calls, chaosCall{Start: t0, Err: "EOF"}, chaosCall{Start: t0, End: t0, Status: 500})
	r = check(in)
	if r.Unanswered != 1 || r.Wrong != 1 || len(r.failed()) != 2 {
		t.Errorf("an unanswered call and a 500: unanswered %d, wrong %d, failures %v", r.Unanswered, r.Wrong, r.failed())
	}
	in = chaosInput{KeysLeft: []string{"qg:{t:1}:inflight:cc"}}
	if len(check(in).failed()) != 1 {
		t.Errorf("a key left behind passed")
	}
}

// TestChaosScheduleIsDeterministic: a seed gives the same schedule every
// time, another seed another one, and the long run's 20 seeds draw every
// fault kind of each topology.
func TestChaosScheduleIsDeterministic(t *testing.T) {
	a, b := chaosSchedule(7, time.Minute, chaosCluster, 3), chaosSchedule(7, time.Minute, chaosCluster, 3)
	if len(a) == 0 || len(a) != len(b) {
		t.Fatalf("seed 7: %d then %d events", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seed 7, event %d: %v then %v", i, a[i], b[i])
		}
	}
	c := chaosSchedule(8, time.Minute, chaosCluster, 3)
	if len(c) == len(a) && c[0] == a[0] && c[len(c)-1] == a[len(a)-1] {
		t.Errorf("seeds 7 and 8 drew the same schedule")
	}
	for _, topo := range chaosTopologies {
		seen := map[string]int{}
		for seed := uint64(1); seed <= 20; seed++ {
			for _, e := range chaosSchedule(seed, time.Minute, topo, 3) {
				seen[e.Kind]++
				if e.At < time.Second || e.At > time.Minute-3*time.Second {
					t.Errorf("%s seed %d: event at %v, outside [1s, 57s]", topo.name, seed, e.At)
				}
				if e.Kind != "gateway-kill" && e.Range >= topo.ranges {
					t.Errorf("%s seed %d: %v on range %d of %d", topo.name, seed, e, e.Range, topo.ranges)
				}
			}
		}
		for _, k := range topo.kinds {
			if seen[k.kind] == 0 {
				t.Errorf("%s: 20 seeds never drew %s", topo.name, k.kind)
			}
		}
	}
}

// TestChaosCheckerWindowAndCalendar: a sliding window's rate in any per
// passes and one more fails; a calendar day's quota likewise, and a day
// later it is new.
func TestChaosCheckerWindowAndCalendar(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 23, 59, 0, 0, time.UTC)
	at := func(ms int) chaosAdmit {
		x := t0.Add(time.Duration(ms) * time.Millisecond)
		return chaosAdmit{Tenant: "a", Route: "w", At: x, End: x, Cost: 1}
	}
	in := chaosInput{Limits: []chaosLimit{{Route: "w", Kind: "window", Rate: 3, Per: time.Second}}, Jitter: 50 * time.Millisecond}
	in.Admits = []chaosAdmit{at(0), at(100), at(200), at(1000), at(1100), at(1200)}
	if f := check(in).failed(); len(f) > 0 {
		t.Fatalf("3 a second in a window of 3: %v", f)
	}
	in.Admits = append(in.Admits, at(800))
	if r := check(in); len(r.failed()) != 1 || r.Keys[0].Over != 1 {
		t.Errorf("4 within 900 ms in a window of 3 per second: %v", r.failed())
	}
	in = chaosInput{Limits: []chaosLimit{{Route: "w", Kind: "calendar", Rate: 2}}}
	in.Admits = []chaosAdmit{at(0), at(1000), at(60_000), at(61_000)} // two on each side of midnight
	if f := check(in).failed(); len(f) > 0 {
		t.Fatalf("2 a day in a quota of 2: %v", f)
	}
	in.Admits = append(in.Admits, at(62_000))
	if r := check(in); len(r.failed()) != 1 || r.Keys[0].Over != 1 {
		t.Errorf("3 in a day in a quota of 2: %v", r.failed())
	}
}

// TestChaosCheckerRegions: a cross-region bucket (burst 100, 100/s,
// safe_share 0.2) kept at its bound passes; extra units outside every
// safe-share window fail (class none); within a window of 2 s of one
// region on its safe share (1 s of it in the worst interval) they pass up
// to the partition bound's 0.2 × (100 + 100 × 1 s) = 40 and fail past it,
// and a window of every region allows three such shares.
func TestChaosCheckerRegions(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lim := []chaosLimit{{Route: "xr", Kind: "regions", Burst: 100, Rate: 100, Safe: 0.2}}
	at := t0.Add(5 * time.Second)
	run := func(extra int, safe []safeWindow) chaosReport {
		in := chaosInput{Limits: lim, Jitter: 10 * time.Millisecond, SafeShare: safe}
		in.Admits = exactBucket(t0, "x", "xr", 100, 100, 10*time.Second)
		for range extra {
			in.Admits = append(in.Admits, chaosAdmit{Tenant: "x", Route: "xr", At: at, End: at, Cost: 1})
		}
		return check(in)
	}
	if f := run(0, nil).failed(); len(f) > 0 {
		t.Fatalf("a record at the bound failed: %v", f)
	}
	if r := run(30, nil); len(r.failed()) != 1 || r.Keys[0].RawClass != "none" {
		t.Errorf("30 extra, no region on its safe share: %v (class %s), want one failure in class none", r.failed(), r.Keys[0].RawClass)
	}
	one := []safeWindow{{Region: 1, From: at.Add(-time.Second), To: at.Add(time.Second), Class: "region-partition"}}
	all := []safeWindow{{Region: -1, From: at.Add(-time.Second), To: at.Add(time.Second), Class: "global-pause"}}
	for _, tc := range []struct {
		extra int
		safe  []safeWindow
		fail  bool
	}{{30, one, false}, {50, one, true}, {100, all, false}, {130, all, true}} {
		r := run(tc.extra, tc.safe)
		if got := len(r.failed()) > 0; got != tc.fail {
			t.Errorf("%d extra within %s: failed=%v (%v), want %v", tc.extra, tc.safe[0].Class, got, r.failed(), tc.fail)
		}
		if r.Keys[0].RawClass != tc.safe[0].Class {
			t.Errorf("%d extra within %s: excess put in class %q", tc.extra, tc.safe[0].Class, r.Keys[0].RawClass)
		}
	}
}
