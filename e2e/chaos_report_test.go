package e2e

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// chaosResult is one seed's figures, as the results page shows them.
type chaosResult struct {
	topology  string
	seed      uint64
	d         time.Duration
	scheduled int
	// done counts the faults carried out per class (failover-auto: the
	// Cluster's own failovers of paused primaries); skipped those the
	// nemesis could not carry out (a range busy, a replica not linked).
	done    map[string]int
	skipped int
	calls   int
	status  map[int]int
	// admitted units (tb, cost) or requests (cc) per route, the planted
	// key left out.
	admitted map[string]int64
	// rawOver is the most units above a strict bound without allowance,
	// per fault class (the planted key left out): "none" must be 0; the
	// classes that lose writes show the failover window's cost.
	rawOver    map[string]map[string]int64 // class → route → units
	over       int64                       // beyond the documented allowance (must be 0)
	plantOver  int64                       // the planted key's over-admission (must be > 0)
	peakCC     int
	unanswered int
	cut        int
	late       int
	keysLeft   int
	// utilisation is what the tb keys admitted over what a saturated
	// bucket would have; short per class the units a saturated bucket
	// would have admitted in the seconds the class was active but did
	// not, over what it would have.
	utilisation float64
	crossIdeal  float64 // the cross-region key's burst + rate × span (regions)
	short, due  map[string]float64
	failures    []string
	keys        []chaosKeyReport
	rangeOf     map[string]int
}

func chaosSummarize(topology string, seed uint64, d time.Duration, events []chaosEvent, faults []chaosFault, rep chaosReport, in chaosInput) chaosResult {
	res := chaosResult{topology: topology, seed: seed, d: d, scheduled: len(events), done: map[string]int{}, status: rep.Status,
		admitted: map[string]int64{}, rawOver: map[string]map[string]int64{}, unanswered: rep.Unanswered, cut: rep.Cut,
		late: rep.Late, keysLeft: len(rep.KeysLeft), short: rep.Short, due: rep.Due, calls: len(in.Calls),
		keys: rep.Keys, rangeOf: in.RangeOf}
	for _, f := range faults {
		if f.Class == "skipped" {
			res.skipped++
			continue
		}
		res.done[f.Class]++
	}
	var got, ideal float64
	for _, k := range rep.Keys {
		if k.Tenant == plantTenant && k.Route == plantRoute {
			res.plantOver = k.Over
			continue
		}
		res.admitted[k.Route] += k.Admitted
		res.over = max(res.over, k.Over)
		if k.Raw > 0 {
			if res.rawOver[k.RawClass] == nil {
				res.rawOver[k.RawClass] = map[string]int64{}
			}
			res.rawOver[k.RawClass][k.Route] = max(res.rawOver[k.RawClass][k.Route], k.Raw)
		}
		if k.Route == crossRoute {
			res.crossIdeal = k.Ideal
		}
		if k.Route == "tb" {
			got += float64(k.Admitted)
			ideal += k.Ideal
		}
		res.peakCC = max(res.peakCC, k.PeakInFlight)
	}
	if ideal > 0 {
		res.utilisation = got / ideal
	}
	for _, f := range rep.failed() {
		if !strings.HasPrefix(f, plantTenant+" "+plantRoute+" ") {
			res.failures = append(res.failures, f)
		}
	}
	return res
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (r chaosResult) faultMix() string {
	var parts []string
	for _, k := range sortedKeys(r.done) {
		parts = append(parts, fmt.Sprintf("%s %d", k, r.done[k]))
	}
	if r.skipped > 0 {
		parts = append(parts, fmt.Sprintf("(skipped %d)", r.skipped))
	}
	return strings.Join(parts, ", ")
}

func (r chaosResult) statusMix() string {
	codes := make([]int, 0, len(r.status))
	for c := range r.status {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	var parts []string
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%d:%d", c, r.status[c]))
	}
	return strings.Join(parts, " ")
}

func (r chaosResult) overMix() string {
	if len(r.rawOver) == 0 {
		return "0"
	}
	var parts []string
	for _, k := range sortedKeys(r.rawOver) {
		var routes []string
		for _, rt := range sortedKeys(r.rawOver[k]) {
			routes = append(routes, fmt.Sprintf("%s %d", rt, r.rawOver[k][rt]))
		}
		parts = append(parts, k+": "+strings.Join(routes, " "))
	}
	return strings.Join(parts, "; ")
}

func (r chaosResult) shortMix() string {
	var parts []string
	for _, k := range sortedKeys(r.due) {
		if r.due[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f%%", k, 100*r.short[k]/r.due[k]))
		}
	}
	return strings.Join(parts, ", ")
}

// text is the seed's report for the test log.
func (r chaosResult) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "CHAOS %s seed %d (%v): faults %s\n", r.topology, r.seed, r.d, r.faultMix())
	fmt.Fprintf(&b, "  calls %d: %s; unanswered %d, cut by a gateway kill %d, late %d\n",
		r.calls, r.statusMix(), r.unanswered, r.cut, r.late)
	fmt.Fprintf(&b, "  admitted: tb %d units (%.0f%% of a saturated bucket), cc %d requests (peak %d in flight, max %d), cost %d units settled\n",
		r.admitted["tb"], 100*r.utilisation, r.admitted["cc"], r.peakCC, chaosCCMax, r.admitted["cost"])
	if x := r.admitted[crossRoute]; x > 0 {
		fmt.Fprintf(&b, "  cross-region %s: %d units admitted in all regions, %.0f%% of the limit's burst + rate × span\n", crossRoute, x, 100*float64(x)/r.crossIdeal)
	}
	fmt.Fprintf(&b, "  over a strict bound without allowance, by class: %s; beyond the allowance: %d; planted key: %d\n", r.overMix(), r.over, r.plantOver)
	fmt.Fprintf(&b, "  tb shortfall by class: %s\n", r.shortMix())
	fmt.Fprintf(&b, "  keys left: %d", r.keysLeft)
	for _, f := range r.failures {
		fmt.Fprintf(&b, "\n  FAIL: %s", f)
	}
	return b.String()
}

// row is the seed's line of the results table.
func (r chaosResult) row() string {
	verdict := "clean"
	if len(r.failures) > 0 {
		verdict = "FAIL: " + strings.Join(r.failures, "; ")
	}
	return fmt.Sprintf("| %s | %d | %v | %s | %d (%s) | %s | %d | %d / %d | %d / %d / %d | %d | %.0f%% | %s | %s |",
		r.topology, r.seed, r.d, r.faultMix(), r.calls, r.statusMix(), r.overMix(), r.over, r.peakCC, chaosCCMax,
		r.unanswered, r.cut, r.late, r.keysLeft, 100*r.utilisation, r.shortMix(), verdict)
}

// chaosRowHeader heads the results table.
const chaosRowHeader = "| topology | seed | traffic | faults carried out | calls (statuses) | over a strict bound without allowance, by class | beyond allowance | cc peak / max | unanswered / cut / late | keys left | tb utilisation | tb shortfall by class | verdict |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"

var chaosPublishMu sync.Mutex

// chaosPublish appends the seed's row to the file QUOTAGATE_CHAOS_REPORT
// names (with the header when the file is new or empty); nothing when
// unset.
func chaosPublish(t *testing.T, r chaosResult) {
	path := os.Getenv("QUOTAGATE_CHAOS_REPORT")
	if path == "" {
		return
	}
	chaosPublishMu.Lock()
	defer chaosPublishMu.Unlock()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("chaos: report: %v", err)
		return
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() == 0 {
		_, _ = f.WriteString(chaosRowHeader)
	}
	if _, err := f.WriteString(r.row() + "\n"); err != nil {
		t.Errorf("chaos: report: %v", err)
	}
}
