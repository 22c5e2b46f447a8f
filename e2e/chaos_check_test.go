package e2e

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// The chaos checker: it reads what the upstream received (chaosAdmit) and
// what the callers saw (chaosCall), with the faults the nemesis injected
// (chaosFault), and computes for each key the bound the docs promise. It is
// a pure function of its inputs (check), so a planted over-admission can be
// fed to it directly (TestChaosCheckerCatchesPlantedOverAdmission).

// chaosLimit is what one route's policy allows per tenant.
type chaosLimit struct {
	Route string
	// Kind is "bucket" (a token bucket, cost per request or settled
	// usage), "regions" (a token bucket shared by regions through a
	// global owner, docs/concepts/regions.md), "window" (a sliding window: Rate units in any Per),
	// "calendar" (a calendar day's fixed window: Rate units per UTC day)
	// or "concurrency".
	Kind string
	// Burst and Rate (units per second) of a bucket; Rate units per Per
	// of a window, per day of a calendar quota.
	Burst int64
	Rate  float64
	Per   time.Duration
	// Max requests in flight of a concurrency policy.
	Max int
	// Safe is the safe_share of a cross-region token bucket ("regions":
	// Burst and Rate are the policy's, one quota across the regions).
	Safe float64
}

// chaosAdmit is one request the upstream received: an admission.
type chaosAdmit struct {
	Tenant, Route string
	At, End       time.Time // arrival at the upstream; end of its handler
	// Cancelled: the handler ended because the gateway closed the
	// exchange (the client left), not by finishing its work.
	Cancelled bool
	// Cost is the units it took: the route's cost, or on a settled route
	// the usage the upstream reported.
	Cost int64
}

// chaosCall is one request as its caller saw it.
type chaosCall struct {
	Tenant, Route string
	Start, End    time.Time
	Status        int    // 0: no answer
	Err           string // transport error, "" when answered
	// Cut: the gateway the call went to was SIGKILLed while it was in
	// flight; no answer is what a killed process gives.
	Cut bool
}

// chaosFault is one injected fault, as the nemesis carried it out.
type chaosFault struct {
	Class      string
	Start, End time.Time
	// Range is the Cluster slot range (primary index) it concerns; -1 for
	// every range (or none: a gateway, a caller, a reload).
	Range int
	// LosesWrites: a promotion that may lose writes Redis acknowledged
	// (a forced failover, a takeover after a SIGKILL, the Cluster's own
	// failover of a paused primary). The docs allow each such promotion
	// one burst (a bucket) or max slots (a concurrency key) per key on
	// its range: the promoted replica's state is older than what was
	// acknowledged, or absent (a full bucket, an empty slot set), as when
	// Redis restarts empty.
	LosesWrites bool
	Note        string
}

// chaosInput is everything the checker reads.
type chaosInput struct {
	Limits []chaosLimit
	// RangeOf maps a tenant to the slot range its keys live in.
	RangeOf map[string]int
	Admits  []chaosAdmit
	Calls   []chaosCall
	Faults  []chaosFault
	// Jitter bounds how far apart the store's decision and the request's
	// arrival at the upstream may be; a bucket gets Rate × Jitter more
	// (rounded up) in any interval.
	Jitter time.Duration
	// CancelSlack is how long after a request's arrival the upstream may
	// still be working on an earlier request of the key whose client left
	// (its slot released): the upstream sees the closed connection that
	// much later than the gateway.
	CancelSlack time.Duration
	// Deadline is the longest an answer may take; slower ones are counted
	// apart from wrong ones.
	Deadline time.Duration
	// Allowed are the statuses a route may answer, where not 200, 429
	// and 503.
	Allowed map[string][]int
	// Saturated names the bucket routes whose callers offer more than the
	// limit all along: their shortfall is reported (chaosReport.Short).
	Saturated []string
	// KeysLeft are the store keys left after the run that should be gone
	// (concurrency slots, keys without an expiry).
	KeysLeft []string
	// SafeShare are the times a region may decide a cross-region key on
	// its safe share (cut off from the owner past its grant, or not yet
	// granted again), which the partition bound allows for.
	SafeShare []safeWindow
}

// chaosKeyReport is the checker's finding for one (tenant, route).
type chaosKeyReport struct {
	Tenant, Route, Kind string
	Admitted            int64 // units (bucket) or requests (concurrency)
	// Over is the most units (bucket) or requests in flight (concurrency)
	// above the bound with the documented allowance; > 0 fails.
	Over int64
	// Raw is the most above the bound without any fault allowance, and
	// RawClass the fault class whose window it fell in ("none": no fault
	// that loses writes).
	Raw      int64
	RawClass string
	Where    string // the interval of the worst excess
	// Ideal is what a saturated bucket would have admitted over the run
	// (burst + rate × span); 0 for concurrency.
	Ideal float64
	// PeakInFlight is the most requests in flight at the upstream.
	PeakInFlight int
}

// chaosReport is the checker's whole finding.
type chaosReport struct {
	Keys []chaosKeyReport
	// Unanswered calls not cut by a gateway kill; Cut those that were.
	Unanswered, Cut int
	// Wrong are answers of a status the route never gives (not 200, 429
	// or 503, or not in chaosInput.Allowed); Late answers past the
	// deadline.
	Wrong, Late   int
	Status        map[int]int
	FirstWrong    string
	FirstUnanswer string
	// Short is, per fault class ("none" for seconds without a fault),
	// over chaosInput.Saturated's keys, the bucket units a saturated bucket would have admitted in the
	// seconds the class was active but were not, and Due what it would
	// have admitted then.
	Short, Due map[string]float64
	// OverByClass is the most raw over-admission per fault class.
	OverByClass map[string]int64
	KeysLeft    []string
}

// failed returns why the run breaks the rules: a bound beyond its
// allowance, an unanswered call, a wrong status, a key left behind. A late
// answer is not among them (see late).
func (r chaosReport) failed() []string {
	var out []string
	for _, k := range r.Keys {
		if k.Over > 0 {
			out = append(out, fmt.Sprintf("%s %s (%s): %d over the bound with its allowance (raw %d in %s, %s)",
				k.Tenant, k.Route, k.Kind, k.Over, k.Raw, k.RawClass, k.Where))
		}
	}
	if r.Unanswered > 0 {
		out = append(out, fmt.Sprintf("%d calls unanswered (first: %s)", r.Unanswered, r.FirstUnanswer))
	}
	if r.Wrong > 0 {
		out = append(out, fmt.Sprintf("%d answers of a wrong status (first: %s)", r.Wrong, r.FirstWrong))
	}
	if len(r.KeysLeft) > 0 {
		out = append(out, fmt.Sprintf("%d store keys left behind: %v", len(r.KeysLeft), r.KeysLeft))
	}
	return out
}

// check applies the rules to in.
func check(in chaosInput) chaosReport {
	r := chaosReport{Status: map[int]int{}, Short: map[string]float64{}, Due: map[string]float64{}, OverByClass: map[string]int64{}, KeysLeft: in.KeysLeft}
	byKey := map[[2]string][]chaosAdmit{}
	for _, a := range in.Admits {
		k := [2]string{a.Tenant, a.Route}
		byKey[k] = append(byKey[k], a)
	}
	limits := map[string]chaosLimit{}
	for _, l := range in.Limits {
		limits[l.Route] = l
	}
	keys := make([][2]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i][0] < keys[j][0] || keys[i][0] == keys[j][0] && keys[i][1] < keys[j][1]
	})
	for _, k := range keys {
		l, ok := limits[k[1]]
		if !ok {
			continue
		}
		as := byKey[k]
		sort.Slice(as, func(i, j int) bool { return as[i].At.Before(as[j].At) })
		rng, ok := in.RangeOf[k[0]]
		if !ok {
			rng = -2 // unknown: no range's promotion applies
		}
		losses := lossWindows(in.Faults, rng)
		var kr chaosKeyReport
		switch l.Kind {
		case "concurrency":
			kr = checkConcurrency(as, l, losses, in.CancelSlack)
		case "window":
			kr = checkWindow(as, l, losses, in.Jitter)
		case "calendar":
			kr = checkCalendar(as, l, losses)
		case "regions":
			kr = checkBucket(as, l, in.Jitter, safeAllowance(in.SafeShare, l))
		default:
			kr = checkBucket(as, l, in.Jitter, lossAllowance(losses, l.Burst))
			if slices.Contains(in.Saturated, l.Route) {
				shortfall(as, l, in.Faults, rng, r.Short, r.Due)
			}
		}
		kr.Tenant, kr.Route, kr.Kind = k[0], k[1], l.Kind
		if kr.Raw > r.OverByClass[kr.RawClass] {
			r.OverByClass[kr.RawClass] = kr.Raw
		}
		r.Keys = append(r.Keys, kr)
	}
	for _, c := range in.Calls {
		switch {
		case c.Status == 0 && c.Cut:
			r.Cut++
		case c.Status == 0:
			r.Unanswered++
			if r.FirstUnanswer == "" {
				r.FirstUnanswer = fmt.Sprintf("%s %s at %s: %s", c.Tenant, c.Route, c.Start.Format("15:04:05.000"), c.Err)
			}
		default:
			r.Status[c.Status]++
			allowed, ok := in.Allowed[c.Route]
			if !ok {
				allowed = []int{200, 429, 503}
			}
			if !slices.Contains(allowed, c.Status) {
				r.Wrong++
				if r.FirstWrong == "" {
					r.FirstWrong = fmt.Sprintf("%s %s at %s: %d", c.Tenant, c.Route, c.Start.Format("15:04:05.000"), c.Status)
				}
			}
			if in.Deadline > 0 && c.End.Sub(c.Start) > in.Deadline {
				r.Late++
			}
		}
	}
	return r
}

// lossWindow is when a promotion that may lose writes happened (somewhere
// in [From, To]), and its class.
type lossWindow struct {
	From, To time.Time
	Class    string
}

// lossWindows returns the promotions that may lose writes on range rng.
func lossWindows(faults []chaosFault, rng int) []lossWindow {
	var out []lossWindow
	for _, f := range faults {
		if f.LosesWrites && (f.Range == rng || f.Range == -1) {
			out = append(out, lossWindow{From: f.Start, To: f.End, Class: f.Class})
		}
	}
	return out
}

// spanning returns the loss windows an interval [a, b] of admissions spans
// (admissions on both sides of the promotion): only those can add to it.
func spanning(losses []lossWindow, a, b time.Time) []lossWindow {
	var out []lossWindow
	for _, w := range losses {
		if !a.After(w.To) && !b.Before(w.From) {
			out = append(out, w)
		}
	}
	return out
}

// classOf names the loss windows ("none" when there are none).
func classOf(ws []lossWindow) string {
	if len(ws) == 0 {
		return "none"
	}
	var names []string
	for _, w := range ws {
		if !slices.Contains(names, w.Class) {
			names = append(names, w.Class)
		}
	}
	sort.Strings(names)
	return strings.Join(names, "+")
}

// checkBucket checks every interval of admissions [i, j] of one key
// (sorted by arrival) against burst + rate × (t_j − t_i) + ⌈rate × 2 ×
// jitter⌉ (each end may be off by the jitter): Raw is the most above it;
// Over the most above it plus what allowance gives the interval, with the
// class of the faults that earn it.
func checkBucket(as []chaosAdmit, l chaosLimit, jitter time.Duration, allowance func(a, b time.Time) (int64, string)) chaosKeyReport {
	kr := chaosKeyReport{RawClass: "none"}
	slack := int64(l.Rate*2*jitter.Seconds() + 0.999999)
	for _, a := range as {
		kr.Admitted += a.Cost
	}
	if len(as) > 0 {
		kr.Ideal = float64(l.Burst) + l.Rate*as[len(as)-1].At.Sub(as[0].At).Seconds()
	}
	for i := range as {
		var sum int64
		for j := i; j < len(as); j++ {
			sum += as[j].Cost
			bound := l.Burst + int64(l.Rate*as[j].At.Sub(as[i].At).Seconds()) + slack
			excess := sum - bound
			if excess <= 0 {
				continue
			}
			allow, class := allowance(as[i].At, as[j].At)
			if excess > kr.Raw {
				kr.Raw, kr.RawClass = excess, class
				kr.Where = fmt.Sprintf("%d units in %s..%s", sum, as[i].At.Format("15:04:05.000"), as[j].At.Format("15:04:05.000"))
			}
			if over := excess - allow; over > kr.Over {
				kr.Over = over
			}
		}
	}
	return kr
}

// lossAllowance allows an interval per units for each promotion that may
// lose writes it spans.
func lossAllowance(losses []lossWindow, per int64) func(a, b time.Time) (int64, string) {
	return func(a, b time.Time) (int64, string) {
		ws := spanning(losses, a, b)
		return per * int64(len(ws)), classOf(ws)
	}
}

// checkConcurrency counts, at each arrival, the requests of the key in
// flight at the upstream (itself included); those whose client left and
// that ended within slack after it are not counted (the gateway had
// released their slot already). The bound is max, plus max for each
// promotion that may lose writes during a request in flight.
func checkConcurrency(as []chaosAdmit, l chaosLimit, losses []lossWindow, slack time.Duration) chaosKeyReport {
	kr := chaosKeyReport{RawClass: "none", Admitted: int64(len(as))}
	for i, a := range as {
		n := 0
		first := a.At
		for j := range i + 1 {
			b := as[j]
			if j < i && !b.End.After(a.At) {
				continue
			}
			if j < i && b.Cancelled && b.End.Sub(a.At) <= slack {
				continue
			}
			n++
			if b.At.Before(first) {
				first = b.At
			}
		}
		kr.PeakInFlight = max(kr.PeakInFlight, n)
		excess := int64(n - l.Max)
		if excess <= 0 {
			continue
		}
		ws := spanning(losses, first, a.At)
		if excess > kr.Raw {
			kr.Raw, kr.RawClass = excess, classOf(ws)
			kr.Where = fmt.Sprintf("%d in flight at %s", n, a.At.Format("15:04:05.000"))
		}
		if over := excess - int64(l.Max*len(ws)); over > kr.Over {
			kr.Over = over
		}
	}
	return kr
}

// shortfall adds, per whole second of the key's admissions, the units a
// saturated bucket would have admitted (rate) and how many it did not, to
// each fault class active in that second ("none" when none was). The first
// second is left out (the burst).
func shortfall(as []chaosAdmit, l chaosLimit, faults []chaosFault, rng int, short, due map[string]float64) {
	if len(as) < 2 || l.Rate <= 0 {
		return
	}
	t0 := as[0].At
	secs := int(as[len(as)-1].At.Sub(t0) / time.Second)
	got := make([]float64, secs+1)
	for _, a := range as {
		got[int(a.At.Sub(t0)/time.Second)] += float64(a.Cost)
	}
	for s := 1; s < secs; s++ {
		from, to := t0.Add(time.Duration(s)*time.Second), t0.Add(time.Duration(s+1)*time.Second)
		var classes []string
		for _, f := range faults {
			if f.Class != "skipped" && (f.Range == rng || f.Range == -1) && f.Start.Before(to) && f.End.After(from) && !slices.Contains(classes, f.Class) {
				classes = append(classes, f.Class)
			}
		}
		if len(classes) == 0 {
			classes = []string{"none"}
		}
		for _, c := range classes {
			due[c] += l.Rate
			short[c] += max(0, l.Rate-got[s])
		}
	}
}

// checkWindow checks a sliding window: the admissions of any interval of
// arrivals no longer than per − 2 × jitter (so decided within per) hold
// at most rate units, plus rate for each promotion that may lose writes
// the interval spans. Ideal is rate per per over the span.
func checkWindow(as []chaosAdmit, l chaosLimit, losses []lossWindow, jitter time.Duration) chaosKeyReport {
	kr := chaosKeyReport{RawClass: "none"}
	span := l.Per - 2*jitter
	for _, a := range as {
		kr.Admitted += a.Cost
	}
	if len(as) > 0 {
		kr.Ideal = l.Rate * (1 + as[len(as)-1].At.Sub(as[0].At).Seconds()/l.Per.Seconds())
	}
	for i := range as {
		var sum int64
		for j := i; j < len(as) && as[j].At.Sub(as[i].At) <= span; j++ {
			sum += as[j].Cost
			excess := sum - int64(l.Rate)
			if excess <= 0 {
				continue
			}
			ws := spanning(losses, as[i].At, as[j].At)
			if excess > kr.Raw {
				kr.Raw, kr.RawClass = excess, classOf(ws)
				kr.Where = fmt.Sprintf("%d units in %s..%s", sum, as[i].At.Format("15:04:05.000"), as[j].At.Format("15:04:05.000"))
			}
			if over := excess - int64(l.Rate)*int64(len(ws)); over > kr.Over {
				kr.Over = over
			}
		}
	}
	return kr
}

// checkCalendar checks a daily quota: the admissions of each UTC day hold
// at most rate units, plus rate for each promotion that may lose writes
// during the day's admissions. Ideal is rate per day seen.
func checkCalendar(as []chaosAdmit, l chaosLimit, losses []lossWindow) chaosKeyReport {
	kr := chaosKeyReport{RawClass: "none"}
	byDay := map[string][]chaosAdmit{}
	for _, a := range as {
		kr.Admitted += a.Cost
		d := a.At.UTC().Format(time.DateOnly)
		byDay[d] = append(byDay[d], a)
	}
	for d, day := range byDay {
		kr.Ideal += l.Rate
		var sum int64
		for _, a := range day {
			sum += a.Cost
		}
		excess := sum - int64(l.Rate)
		if excess <= 0 {
			continue
		}
		ws := spanning(losses, day[0].At, day[len(day)-1].At)
		if excess > kr.Raw {
			kr.Raw, kr.RawClass, kr.Where = excess, classOf(ws), fmt.Sprintf("%d units on %s", sum, d)
		}
		if over := excess - int64(l.Rate)*int64(len(ws)); over > kr.Over {
			kr.Over = over
		}
	}
	return kr
}
