package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
)

// The store outage scenario shared by the Redis fault tests: one gateway,
// a Redis deadline of faultTimeout, and one route per on_store_error mode.
const (
	faultTimeout = 50 * time.Millisecond
	// latencyMargin is what a request may take beyond the store deadline on
	// a loaded two-core machine; the bound stays far under 500 ms.
	latencyMargin = 200 * time.Millisecond
	// localBurst is the burst of the p_local policy; with fleet_size 2 this
	// instance's share, used while the store is down, is half of it.
	localBurst = 20
	localShare = localBurst / 2
	// exactBurst is the burst of p_exact, which checks after an outage
	// that decisions are exact again.
	exactBurst = 5
)

// outageConfig returns the config of the outage scenario against the Redis
// at addr: routes /open, /closed, /local and /exact, each limited by the
// policy of that mode (p_exact fails closed). The limits of p_open and
// p_closed are far above the offered load.
func outageConfig(upstreamURL, addr string) *gwConfig {
	c := limiterConfig(upstreamURL, nil, "acme", "after", "fault")
	c.useRedis(faultTimeout.String(), addr)
	c.Store.FleetSize = 2
	big := map[string]limitCfg{"std": bucket(100000, "1s", 100000)}
	c.Policies["p_open"] = policyCfg{OnStoreError: "open", Limits: big}
	c.Policies["p_closed"] = policyCfg{OnStoreError: "closed", Limits: big}
	c.Policies["p_local"] = policyCfg{OnStoreError: "local", Limits: map[string]limitCfg{"std": bucket(1, "1h", localBurst)}}
	c.Policies["p_exact"] = policyCfg{OnStoreError: "closed", Limits: map[string]limitCfg{"std": bucket(1, "1h", exactBurst)}}
	for _, m := range []string{"open", "closed", "local", "exact"} {
		c.route(m, "GET", "/"+m+"/{rest...}", 1, "p_"+m)
	}
	return c
}

// outage is one way of making the store fail for a while.
type outage struct {
	fault  string // for the fault table
	inject func()
	heal   func()
	// storeFills is how many times the store starts from full buckets
	// during the run: 1, or 2 when the fault empties it.
	storeFills int
}

// outageResult is what the scenario measured.
type outageResult struct {
	all, during map[string]summary // by route, over the whole run / while the fault lasted
	outs        []outcome
	faultStart  time.Time
	faultEnd    time.Time
}

// runOutage drives 6 paced workers over /open, /closed and /local for
// 500 ms, injects the fault for 2 s, heals it, and keeps the traffic going
// for 1.5 s more. It then asserts what every store fault must give:
//
//   - every request is answered, with 200, 429 or 503 only, and 503 only on
//     the route whose policy fails closed;
//   - while the fault lasts, on_store_error open answers 200, closed answers
//     503 problem+json limiter_unavailable with Retry-After (see
//     checkClosedDuring), and local admits the tenant sent then its share
//     of the limit, then denies; over the run the fallback admits no tenant
//     more than its share, and quotagate_decisions_total{stage="fallback"}
//     counts what it admitted (see checkLocalShares);
//   - requests during the fault are answered within the store deadline plus
//     latencyMargin (99th percentile; every one under 500 ms), and once the
//     circuit breaker is open (from 300 ms into the fault) the median
//     request does not pay the deadline at all;
//   - /readyz answers 503 during the fault and 200 again within 5 s of the
//     heal, after which decisions are exact again (p_exact admits exactly
//     its burst to a tenant that never used it).
func runOutage(t *testing.T, gw *gateway, o outage) outageResult {
	t.Helper()
	routes := []string{"open", "closed", "local"}
	var res outageResult
	var outs []outcome
	var wg sync.WaitGroup
	// While the fault lasts, /local is sent by a tenant that Redis never
	// denied: acme, out of its burst before the fault, is answered from the
	// gateway's cache of store denials until its Retry-After (an hour),
	// which would keep the fallback share from ever being used.
	var faulty atomic.Bool
	wg.Add(1)
	go func() {
		defer wg.Done()
		outs = load{workers: 6, duration: 4 * time.Second, pace: 5 * time.Millisecond, keepBody: true, next: func(w, i int) call {
			r := routes[(w+i)%len(routes)]
			key := "key-acme"
			if r == "local" && faulty.Load() {
				key = "key-fault"
			}
			return call{label: r, base: gw.URL, path: "/" + r + "/x", key: key}
		}}.run(t)
	}()
	time.Sleep(500 * time.Millisecond) // traffic on a healthy store first
	faulty.Store(true)
	o.inject()
	// The fault is in place from here: a request started between the
	// switch of tenant and this point may still have met a healthy store.
	res.faultStart = time.Now()
	time.Sleep(time.Second)
	readyDuring := readyzStatus(gw)
	time.Sleep(time.Second)
	res.faultEnd = time.Now()
	o.heal()
	faulty.Store(false)
	wg.Wait()
	res.outs = outs

	during := func(o outcome) bool { return !o.start.Before(res.faultStart) && !o.end.After(res.faultEnd) }
	opened := func(o outcome) bool { return during(o) && o.start.After(res.faultStart.Add(300*time.Millisecond)) }
	res.all, res.during = map[string]summary{}, map[string]summary{}
	for _, r := range routes {
		res.all[r] = summarize(outs, byLabel(r))
		res.during[r] = summarize(outs, func(o outcome) bool { return o.label == r && during(o) })
	}
	whole := summarize(outs, nil)
	fault := summarize(outs, during)
	afterOpen := summarize(outs, opened)
	t.Logf("%s: whole run %s; during the fault: open %s, closed %s, local %s; fault p50 %v p99 %v worst %v; after the breaker opened p50 %v",
		o.fault, whole.mix(), res.during["open"].mix(), res.during["closed"].mix(), res.during["local"].mix(),
		fault.pct(50), fault.pct(99), fault.worst(), afterOpen.pct(50))

	before := summarize(outs, func(o outcome) bool { return o.end.Before(res.faultStart) })
	after := summarize(outs, func(o outcome) bool { return o.start.After(res.faultEnd) })
	recovered := time.Duration(-1)
	for _, o := range outs {
		if o.label == "closed" && o.status == 200 && o.start.After(res.faultEnd) {
			if d := o.end.Sub(res.faultEnd); recovered < 0 || d < recovered {
				recovered = d
			}
		}
	}
	t.Logf("before the fault %s; after the heal %s; first closed-policy 200 %v after the heal", before.mix(), after.mix(), recovered.Round(time.Millisecond))
	for _, o := range slowest(outs, 5) {
		t.Logf("slow: %s started %v after the fault began, took %v, status %d", o.label, o.start.Sub(res.faultStart).Round(time.Millisecond), o.latency().Round(time.Millisecond), o.status)
	}
	if whole.unanswered > 0 {
		t.Errorf("%d requests unanswered (first error: %v)", whole.unanswered, whole.firstErr)
	}
	if !res.all["open"].only(200) || !res.all["local"].only(200, 429) || !res.all["closed"].only(200, 503) {
		t.Errorf("unexpected statuses: open %s, local %s, closed %s", res.all["open"].mix(), res.all["local"].mix(), res.all["closed"].mix())
	}
	checkClosedDuring(t, outs, during)
	if d := res.during["open"]; d.n == 0 || d.status[200] != d.n {
		t.Errorf("open policy during the fault: %s, want only 200", d.mix())
	}
	checked := false
	for _, o := range outs {
		if during(o) && o.label == "closed" && o.status == 503 && !checked {
			checkUnavailable(t, o, "p_closed")
			checked = true
		}
	}
	// The local policy admits, per tenant, at most its share from the
	// fallback and its limit per store fill from Redis.
	checkLocalShares(t, gw, outs, o.storeFills)
	// Latency bounds are bounds on time: past them on a busy machine the
	// run missed a deadline. A request of the fault that lasted the whole
	// fault, though, was answered only because the store came back: the
	// store deadline was not enforced, a wrong answer.
	faultLen := res.faultEnd.Sub(res.faultStart)
	if w := fault.worst(); w >= faultLen {
		t.Errorf("a request during the fault took %v, the fault's whole %v: the store deadline %v was not enforced", w, faultLen, faultTimeout)
	} else if p := fault.pct(99); p > faultTimeout+latencyMargin || w >= 500*time.Millisecond {
		proctest.Overrun(t, "latency during the fault: p99 %v, worst %v; want p99 at most the deadline %v + %v and every request under 500 ms",
			p, w, faultTimeout, latencyMargin)
	}
	if afterOpen.n == 0 {
		t.Errorf("no request started after the breaker should have opened")
	} else if gw.metric("quotagate_store_errors_total", "kind=breaker_open") == 0 {
		t.Errorf("the circuit breaker never opened during the fault (median latency from 300 ms into it %v)", afterOpen.pct(50))
	} else if p := afterOpen.pct(50); p >= faultTimeout {
		proctest.Overrun(t, "median latency once the breaker is open: %v over %d requests, want under the deadline %v", p, afterOpen.n, faultTimeout)
	}
	if readyDuring != http.StatusServiceUnavailable {
		t.Errorf("/readyz during the fault answered %d, want 503", readyDuring)
	}
	if !gw.pollReady(5 * time.Second) {
		// Late, or never: only the second is a wrong answer.
		if !gw.pollReady(25 * time.Second) {
			t.Fatalf("/readyz not 200 within 30 s after the fault was healed")
		}
		proctest.Overrun(t, "/readyz 200 only after more than 5 s after the fault was healed")
	}
	// Ready, the breaker is closed: a 503 now needs a new store failure.
	timeouts := gw.metric("quotagate_store_errors_total", "kind=timeout")
	if got := sequential(t, gw, "/exact/x", "key-after", exactBurst+3); got != exactSeq(exactBurst, 3) {
		if strings.Contains(got, "503") && strings.Count(got, "200") <= exactBurst &&
			gw.metric("quotagate_store_errors_total", "kind=timeout") > timeouts {
			proctest.Overrun(t, "after the fault, a fresh tenant on a burst of %d got %s, want %s: store calls passed their %v deadline again",
				exactBurst, got, exactSeq(exactBurst, 3), faultTimeout)
		} else {
			t.Errorf("after the fault, a fresh tenant on a burst of %d got %s, want %s", exactBurst, got, exactSeq(exactBurst, 3))
		}
	}

	over := res.during["closed"].status[200]
	recordFault(t, faultRecord{
		Fault:  o.fault,
		Expect: "open→200, closed→503 limiter_unavailable, local→share of " + strconv.Itoa(localShare) + "; ≤ deadline+margin; readyz 503 then 200; exact after",
		Mix: fmt.Sprintf("during: open %s; closed %s; local %s — closed policy back to 200 %v after the heal",
			res.during["open"].mix(), res.during["closed"].mix(), res.during["local"].mix(), recovered.Round(time.Millisecond)),
		Worst:      whole.worst(),
		Unanswered: whole.unanswered,
		Over: fmt.Sprintf("closed %d; local %d admitted during the fault (share %d, by design), %d over the run (limit %d per store fill); open: %d allowed unchecked (by design)",
			over, res.during["local"].status[200], localShare, res.all["local"].status[200], localBurst, res.during["open"].status[200]),
	})
	return res
}

// checkClosedDuring asserts that the fail-closed route answered 503 to
// every request of the fault (those during selects). A 200 is an answer of
// the store; while the fault lasts none comes within the deadline, so one
// taking at least the deadline means the gateway saw its deadline pass
// only after the late answer had come, as a busy machine may run a timer
// late: a missed deadline. A 200 in less than the deadline is a wrong
// answer, as is any other status.
func checkClosedDuring(t *testing.T, outs []outcome, during func(outcome) bool) {
	t.Helper()
	d := summarize(outs, func(o outcome) bool { return o.label == "closed" && during(o) })
	late := summarize(outs, func(o outcome) bool {
		return o.label == "closed" && during(o) && o.status == http.StatusOK && o.latency() >= faultTimeout
	})
	switch {
	case d.n == 0 || d.status[503]+late.n != d.n:
		t.Errorf("closed policy during the fault: %s (%d of the 200s took the deadline %v or more), want only 503", d.mix(), late.n, faultTimeout)
	case late.n > 0:
		proctest.Overrun(t, "closed policy during the fault: %s; %d requests were answered by the store after the deadline %v, the fastest in %v",
			d.mix(), late.n, faultTimeout, late.pct(0))
	}
}

// checkUnavailable asserts the documented shape of a store-failure 503.
func checkUnavailable(t *testing.T, o outcome, policy string) {
	t.Helper()
	if ra, err := strconv.Atoi(o.header.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("503 Retry-After %q, want whole seconds >= 1", o.header.Get("Retry-After"))
	}
	if ct := o.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("503 Content-Type %q, want application/problem+json", ct)
	}
	var p struct{ Error, Policy string }
	if err := json.Unmarshal(o.body, &p); err != nil || p.Error != "limiter_unavailable" || p.Policy != policy {
		t.Errorf("503 body %s (%v), want error limiter_unavailable, policy %s", o.body, err, policy)
	}
}

// readyzStatus returns the status of one /readyz call (0 on a transport
// error).
func readyzStatus(gw *gateway) int {
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(gw.Admin + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// sequential sends n requests one after another and returns their statuses
// as "200 200 429".
func sequential(t *testing.T, gw *gateway, path, key string, n int) string {
	t.Helper()
	client := newClient(1)
	defer client.CloseIdleConnections()
	var codes []string
	for range n {
		o := do(client, call{base: gw.URL, path: path, key: key}, false)
		if o.err != nil {
			codes = append(codes, "err")
			continue
		}
		codes = append(codes, strconv.Itoa(o.status))
	}
	return strings.Join(codes, " ")
}

// exactSeq is the statuses of a fresh bucket of burst hit burst+extra times.
func exactSeq(burst, extra int) string {
	return strings.TrimSpace(strings.Repeat("200 ", burst) + strings.Repeat("429 ", extra))
}

// slowest returns the n slowest outcomes, slowest first.
func slowest(outs []outcome, n int) []outcome {
	s := append([]outcome(nil), outs...)
	sort.Slice(s, func(i, j int) bool { return s[i].latency() > s[j].latency() })
	return s[:min(n, len(s))]
}
