package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
)

// The regions test bed: three regions on loopback, each with its own
// redis-server and gateways, one global redis-server, and a TCP relay
// between each region and the global Redis (latency and partitions on
// command). Numbers are scaled down so that a run lasts some 25 s: a
// global limit of regionRate per second (burst regionBurst), reports every
// regionInterval, grants for regionTTL.
const (
	regionRate     = 100
	regionBurst    = 100
	regionInterval = 500 * time.Millisecond
	regionTTL      = 2 * time.Second
	regionSafe     = 0.2
)

type regionBed struct {
	global   *redistest.Server
	regional []*redistest.Server
	relays   []*tcpProxy
	gws      [][]*gateway
	up       *upstream
	names    []string
	started  time.Time
}

func startRegionBed(t *testing.T, perRegion []int, edit ...func(*gwConfig)) *regionBed {
	t.Helper()
	b := &regionBed{global: redistest.StartStandalone(t), up: startUpstream(t), names: []string{"eu", "us", "ap"}}
	for i, name := range b.names {
		rs := redistest.StartStandalone(t)
		relay := startTCPProxy(t, b.global.Addr)
		b.relays = append(b.relays, relay)
		cfg := limiterConfig(b.up.URL(), []string{rs.Addr}, "acme")
		cfg.Store.Region = name
		cfg.Store.Global = &globalCfg{Redis: redisCfg{Addrs: []string{relay.Addr}, Timeout: "300ms"},
			ReportInterval: regionInterval.String(), LeaseTTL: regionTTL.String()}
		cfg.Policies["quota"] = policyCfg{OnStoreError: "closed", Limits: map[string]limitCfg{"std": bucket(regionRate, "1s", regionBurst)},
			Regions: &regionsCfg{Mode: "leased", SafeShare: regionSafe}}
		cfg.route("items.get", "GET", "/ok/{rest...}", 1, "quota")
		for _, e := range edit {
			e(cfg)
		}
		b.regional = append(b.regional, rs)
		b.gws = append(b.gws, startGateways(t, perRegion[i], cfg))
	}
	b.started = time.Now()
	return b
}

// admission is one answered request.
type admission struct {
	at      time.Duration // since the bed started, when it was sent
	latency time.Duration
	region  int
	status  int
}

// drive sends, from each region, rates()[i] requests per second (spread
// over its gateways, every 10 ms, up to 32 in flight per region) until
// stop, and records every answer. A gateway that is down (killed by the
// test) is skipped.
func (b *regionBed) drive(t *testing.T, rates func() []int, stop <-chan struct{}) []admission {
	var mu sync.Mutex
	var out []admission
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for i := range b.names {
		wg.Go(func() {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			slots := make(chan struct{}, 32)
			n := 0
			carry := 0.0
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				carry += float64(rates()[i]) / 100
				for ; carry >= 1; carry-- {
					gw := b.gws[i][n%len(b.gws[i])]
					n++
					if gw.exited() {
						gw = b.gws[i][n%len(b.gws[i])]
					}
					slots <- struct{}{}
					wg.Go(func() {
						defer func() { <-slots }()
						sent := time.Now()
						req, _ := http.NewRequest("GET", gw.URL+"/ok/x", nil)
						req.Header.Set("Authorization", "Bearer key-acme")
						resp, err := client.Do(req)
						if err != nil {
							return // counted as unanswered by its absence
						}
						_ = resp.Body.Close()
						mu.Lock()
						out = append(out, admission{at: sent.Sub(b.started), latency: time.Since(sent), region: i, status: resp.StatusCode})
						mu.Unlock()
					})
				}
			}
		})
	}
	<-stop
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].at < out[j].at })
	return out
}

// checkBound checks, in every window of 1 s and 4 s within [0, end), the
// bound of docs/concepts/regions.md: admissions ≤ burst + rate × T, plus
// safe × (burst + rate × T) for each region that safe(from, to) says may
// be on its safe share in the window. It returns the largest ratio of
// admissions to the connected bound.
func checkBound(t *testing.T, as []admission, end time.Duration, safe func(from, to time.Duration) int) float64 {
	t.Helper()
	worst := 0.0
	for _, w := range []time.Duration{time.Second, 4 * time.Second} {
		for from := time.Duration(0); from+w <= end; from += 100 * time.Millisecond {
			got := admittedIn(as, from, from+w)
			connected := regionBurst + regionRate*w.Seconds()
			bound := int(connected)
			// Before the first grants (the owner's warm-up) every region
			// is on its safe share.
			n := safe(from, from+w)
			if from < regionTTL+regionInterval {
				n = 3
			}
			bound += int(float64(n) * regionSafe * connected)
			worst = max(worst, float64(got)/connected)
			if got > bound {
				t.Errorf("window [%v, %v): %d admitted > bound %d", from, from+w, got, bound)
			}
		}
	}
	return worst
}

// checkUtilisation checks that at least 90 % of the limit was admitted in
// [from, to). When the load generator itself fell behind (fewer requests
// answered than 1.2 × the limit: the machine too busy to send the demand)
// the shortfall is reported as a missed deadline, apart from a wrong
// answer.
func checkUtilisation(t *testing.T, what string, as []admission, from, to time.Duration) {
	t.Helper()
	got, answered := admittedIn(as, from, to), 0
	for _, a := range as {
		if a.at >= from && a.at < to {
			answered++
		}
	}
	limit := regionRate * (to - from).Seconds()
	t.Logf("%s: %d admitted of %d answered in [%v, %v), %.0f%% of the limit", what, got, answered,
		from.Round(time.Millisecond), to.Round(time.Millisecond), 100*float64(got)/limit)
	switch {
	case float64(got) >= 0.9*limit:
	case float64(answered) < 1.2*limit:
		t.Errorf("%s: missed deadline, not a wrong answer: the load generator got only %d requests answered (%.0f%% of the limit), too few to judge utilisation", what, answered, 100*float64(answered)/limit)
	default:
		t.Errorf("%s: %d admitted, want >= %.0f (90%% of the limit)", what, got, 0.9*limit)
	}
}

// steady is demand twice the limit, split 70/20/10.
func steady() []int {
	return []int{2 * regionRate * 70 / 100, 2 * regionRate * 20 / 100, 2 * regionRate * 10 / 100}
}

// after runs f after d, the time of a phase of the test (not a wait for
// something to happen).
func after(d time.Duration, f func()) { time.AfterFunc(d, f) }

// admittedIn counts the 200s answered in [from, to).
func admittedIn(as []admission, from, to time.Duration) int {
	n := 0
	for _, a := range as {
		if a.status == 200 && a.at >= from && a.at < to {
			n++
		}
	}
	return n
}

// TestRegionsShiftingDemand (scenario 2): one tenant, one global limit;
// demand twice the limit, split 70/20/10 across the regions, then
// 10/20/70. Admissions, counted by the upstream, never exceed the bound
// of docs/concepts/regions.md in any window, and within three report
// intervals of each shift the regions use at least 90 % of the limit.
func TestRegionsShiftingDemand(t *testing.T) {
	b := startRegionBed(t, []int{2, 1, 1})
	const phase = 9 * time.Second
	demand := 2 * regionRate
	var shifted time.Time
	var smu sync.Mutex
	rates := func() []int {
		smu.Lock()
		defer smu.Unlock()
		if shifted.IsZero() {
			return []int{demand * 70 / 100, demand * 20 / 100, demand * 10 / 100}
		}
		return []int{demand * 10 / 100, demand * 20 / 100, demand * 70 / 100}
	}
	stop := make(chan struct{})
	go func() {
		time.Sleep(phase) // the length of the first phase, not synchronization
		smu.Lock()
		shifted = time.Now()
		smu.Unlock()
		time.Sleep(phase)
		close(stop)
	}()
	as := b.drive(t, rates, stop)
	shift := shifted.Sub(b.started)
	end := shift + phase

	upstream := len(b.up.requests())
	ok := admittedIn(as, 0, end+time.Hour)
	if upstream != ok {
		t.Errorf("upstream saw %d requests, clients got %d 200s", upstream, ok)
	}
	worst := checkBound(t, as, end, func(_, _ time.Duration) int { return 0 })
	t.Logf("most admitted in a window: %.2f × the connected bound", worst)
	// Utilisation: from three report intervals after each change (the
	// start's warm-up included) to the end of its phase.
	for _, p := range []struct {
		name     string
		from, to time.Duration
	}{{"70/20/10", regionTTL + 3*regionInterval, shift}, {"10/20/70", shift + 3*regionInterval, end}} {
		checkUtilisation(t, p.name, as, p.from, p.to)
	}
	per := make([]int, 3)
	for _, a := range as {
		if a.status == 200 && a.at >= shift+3*regionInterval {
			per[a.region]++
		}
	}
	t.Logf("after the shift, admitted per region (eu, us, ap): %v", per)
	// Metrics: one reporter per region, which saw grants and demand; the
	// region heard from the owner within lease_ttl.
	for i, gws := range b.gws {
		reporters := 0.0
		for _, g := range gws {
			label := "region=" + b.names[i]
			reporters += g.metric("quotagate_region_reporter", label)
			if g.metric("quotagate_region_reporter", label) == 1 {
				if v := g.metric("quotagate_region_granted_rate", label); v <= 0 || v > regionRate {
					t.Errorf("%s: quotagate_region_granted_rate = %v, want in (0, %d]", b.names[i], v, regionRate)
				}
				if v := g.metric("quotagate_region_demand_rate", label); v <= 0 {
					t.Errorf("%s: quotagate_region_demand_rate = %v, want > 0", b.names[i], v)
				}
				// The region's one cross-region policy, labelled by its name.
				if v := g.metric("quotagate_region_policy_demand_rate", label, "policy=quota"); v <= 0 {
					t.Errorf("%s: quotagate_region_policy_demand_rate of quota = %v, want > 0", b.names[i], v)
				}
			}
			if v := g.metric("quotagate_region_since_report_seconds", label); v < 0 || v > regionTTL.Seconds() {
				t.Errorf("%s/%s: quotagate_region_since_report_seconds = %v, want in [0, %v]", b.names[i], g.name, v, regionTTL.Seconds())
			}
		}
		if reporters != 1 {
			t.Errorf("%s: %v instances report quotagate_region_reporter 1, want 1", b.names[i], reporters)
		}
	}
	if per[2] <= per[0] {
		t.Errorf("after the shift ap admitted %d, eu %d: the grants did not follow the demand", per[2], per[0])
	}
}

// TestRegionsPartition (scenario 3): under steady demand, region eu is cut
// off from the global Redis (its relay a black hole) for partitionFor. It
// keeps its last grant until lease_ttl, then decides on its safe share;
// the others take the capacity its claim gave back. Admissions stay within
// the partition bound in every window; after the heal the region is
// granted again within lease_ttl and three report intervals, and the
// connected bound holds again from then.
func TestRegionsPartition(t *testing.T) {
	const partitionFor = 8 * time.Second
	b := startRegionBed(t, []int{1, 1, 1})
	cut, healed := 5*time.Second, 5*time.Second+partitionFor
	after(cut, b.relays[0].blackhole)
	after(healed, b.relays[0].heal)
	stop := make(chan struct{})
	end := healed + 7*time.Second
	after(end, func() { close(stop) })
	as := b.drive(t, steady, stop)

	// eu may be on its safe share from the cut (its grant expires within
	// lease_ttl) until it is granted again after the heal.
	regranted := healed + regionTTL + 3*regionInterval
	worst := checkBound(t, as, end, func(from, to time.Duration) int {
		if to > cut && from < regranted {
			return 1
		}
		return 0
	})
	t.Logf("most admitted in a window: %.2f × the connected bound (partition bound %.2f)", worst, 1+regionSafe)
	// During the partition, past its grant, eu admits about its safe share.
	eu := 0
	from, to := cut+regionTTL+regionInterval, healed
	for _, a := range as {
		if a.region == 0 && a.status == 200 && a.at >= from && a.at < to {
			eu++
		}
	}
	safe := regionSafe * (regionBurst + regionRate*(to-from).Seconds())
	t.Logf("eu admitted %d in [%v, %v) cut off (safe share bound %.0f)", eu, from, to, safe)
	if float64(eu) > safe {
		t.Errorf("eu admitted %d cut off, above its safe share %.0f", eu, safe)
	}
	if eu == 0 {
		t.Error("eu admitted nothing cut off: its safe share was not applied")
	}
	// After the heal: rebalanced, the whole limit in use again.
	checkUtilisation(t, "after the heal", as, regranted, end)
	// The metrics per policy: each gateway exports the series of policy
	// quota, labelled with its region; eu's grant expired cut off, not
	// renewed (a lease expiry); its safe-share decisions are all quota's.
	for i, gws := range b.gws {
		for _, g := range gws {
			ss, err := g.metrics()
			if err != nil {
				t.Fatalf("%s: %v", g.name, err)
			}
			n := 0
			for _, x := range ss {
				if strings.HasPrefix(x.name, "quotagate_region_policy_") || x.name == "quotagate_region_lease_expiries_total" {
					n++
					if x.labels["policy"] != "quota" || x.labels["region"] != b.names[i] || len(x.labels) != 2 {
						t.Errorf("%s: %s%v, want labels region=%s and policy=quota alone", g.name, x.name, x.labels, b.names[i])
					}
				}
			}
			if n != 6 {
				t.Errorf("%s: %d per-policy region series, want 6 (4 gauges, 2 counters of policy quota)", g.name, n)
			}
			label := []string{"region=" + b.names[i], "policy=quota"}
			expiries := ss.sum("quotagate_region_lease_expiries_total", label...)
			safe, total := ss.sum("quotagate_region_policy_safe_share_decisions_total", label...), ss.sum("quotagate_region_safe_share_decisions_total")
			t.Logf("%s/%s: %v lease expiries, %v of %v safe-share decisions of quota", b.names[i], g.name, expiries, safe, total)
			if safe != total {
				t.Errorf("%s: %v safe-share decisions of quota, %v in all: every cross-region item is quota's", g.name, safe, total)
			}
			if i == 0 && (expiries < 1 || safe < 1) {
				t.Errorf("%s: %v lease expiries, %v safe-share decisions of quota after %v cut off, want at least 1 each", g.name, expiries, safe, partitionFor)
			}
		}
	}
}

// TestRegionsReporterKilled (scenario 4): eu runs two gateways; the one
// that reports is SIGKILLed under load. The other takes the reporter's
// lock within lease_ttl, the region keeps its grants, and nothing is
// admitted over the connected bound.
func TestRegionsReporterKilled(t *testing.T) {
	b := startRegionBed(t, []int{2, 1, 1}, func(c *gwConfig) { c.Log = &logCfg{Level: "info"} })
	const line = "regions: reporter of the region"
	stop := make(chan struct{})
	end := 13 * time.Second
	after(end, func() { close(stop) })
	var killedAt, takenAt time.Duration
	var mu sync.Mutex
	go func() {
		time.Sleep(5 * time.Second) // the phase before the kill
		var reporter, other *gateway
		for i, g := range b.gws[0] {
			if g.logs.count(line) > 0 {
				reporter, other = g, b.gws[0][1-i]
			}
		}
		if reporter == nil {
			t.Error("no gateway of eu says it is the reporter")
			return
		}
		mu.Lock()
		killedAt = time.Since(b.started)
		mu.Unlock()
		reporter.proc.Signal(syscall.SIGKILL)
		deadline := time.Now().Add(2 * regionTTL)
		for other.logs.count(line) == 0 && time.Now().Before(deadline) {
			time.Sleep(regionInterval / 10)
		}
		mu.Lock()
		if other.logs.count(line) > 0 {
			takenAt = time.Since(b.started)
		}
		mu.Unlock()
	}()
	as := b.drive(t, steady, stop)
	mu.Lock()
	defer mu.Unlock()
	if killedAt == 0 {
		return
	}
	if takenAt == 0 {
		t.Fatalf("no takeover within %v of the kill", 2*regionTTL)
	}
	took := takenAt - killedAt
	t.Logf("takeover %v after the kill (lease_ttl %v)", took.Round(time.Millisecond), regionTTL)
	if took > regionTTL {
		t.Errorf("takeover took %v > lease_ttl %v", took, regionTTL)
	}
	worst := checkBound(t, as, end, func(_, _ time.Duration) int { return 0 })
	t.Logf("most admitted in a window: %.2f × the connected bound", worst)
	got := admittedIn(as, killedAt+regionTTL, end)
	t.Logf("after the takeover: %.0f%% of the limit", 100*float64(got)/(regionRate*(end-killedAt-regionTTL).Seconds()))
}

// TestRegionsGlobalRestartedEmpty (scenario 5): the global Redis restarts
// empty under load. Its warm-up grants each region at most what it holds
// until lease_ttl has passed, so the connected bound holds throughout; the
// grants rebuild from the reports and the whole limit is in use again.
func TestRegionsGlobalRestartedEmpty(t *testing.T) {
	b := startRegionBed(t, []int{1, 1, 1})
	restart := 5 * time.Second
	after(restart, b.global.Restart)
	stop := make(chan struct{})
	end := restart + 10*time.Second
	after(end, func() { close(stop) })
	as := b.drive(t, steady, stop)
	// A region whose grant expires while the owner is down or warming up
	// holds nothing and is then on its safe share, until granted again.
	rebuilt := restart + 2*regionTTL + 3*regionInterval
	worst := checkBound(t, as, end, func(from, to time.Duration) int {
		if to > restart && from < rebuilt {
			return 3
		}
		return 0
	})
	t.Logf("most admitted in a window: %.2f × the connected bound", worst)
	checkUtilisation(t, "after the rebuild", as, rebuilt, end)
}

// TestRegionsGlobalLatencyOffPath (scenario 1): 100 ms added between every
// region and the global Redis leave the requests' latency as it was: a
// request never waits for the global Redis.
func TestRegionsGlobalLatencyOffPath(t *testing.T) {
	b := startRegionBed(t, []int{1, 1, 1})
	phase := 6 * time.Second
	after(phase, func() {
		for _, r := range b.relays {
			r.setDelay(100 * time.Millisecond)
		}
	})
	stop := make(chan struct{})
	after(2*phase, func() { close(stop) })
	as := b.drive(t, steady, stop)
	pct := func(q int, from, to time.Duration) time.Duration {
		var ls []time.Duration
		for _, a := range as {
			if a.at >= from && a.at < to {
				ls = append(ls, a.latency)
			}
		}
		if len(ls) == 0 {
			return 0
		}
		slices.Sort(ls)
		return ls[len(ls)*q/100]
	}
	base, delayed := pct(99, regionTTL+regionInterval, phase), pct(99, phase+regionInterval, 2*phase)
	base50, delayed50 := pct(50, regionTTL+regionInterval, phase), pct(50, phase+regionInterval, 2*phase)
	t.Logf("request p50 %v, p99 %v without added latency; p50 %v, p99 %v with 100ms to the global Redis",
		base50, base, delayed50, delayed)
	// On the path, 100 ms would show in every request, the median first.
	if delayed50 > 2*base50+5*time.Millisecond {
		t.Errorf("p50 %v with 100ms to the global Redis, %v without: the request path waits for it", delayed50, base50)
	}
	if delayed > max(2*base, base+50*time.Millisecond) {
		t.Errorf("p99 %v with 100ms to the global Redis, %v without: the request path waits for it", delayed, base)
	}
	worst := checkBound(t, as, 2*phase, func(_, _ time.Duration) int { return 0 })
	t.Logf("most admitted in a window: %.2f × the connected bound", worst)
}

// regionGrant is a grant of a GET /_quota entry's regions object.
type regionGrant struct {
	Region    string
	Rate      int64
	Burst     int64
	ExpiresMS int64 `json:"expires_ms"`
	Demand    int64
}

// regionQuota is a GET /_quota entry with its regions object.
type regionQuota struct {
	Name      string
	Limit     int64
	Remaining int64
	Regions   *struct {
		Region    string
		Grant     *regionGrant
		SafeShare bool `json:"safe_share"`
		Global    struct {
			Available   bool
			Reason      string
			Rate, Burst int64
			Regions     []regionGrant
		}
	}
}

// quotaOf returns the entry of policy "quota" in gw's GET /_quota answer
// (which must be 200).
func quotaOf(t *testing.T, gw *gateway) regionQuota {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, gw.URL+"/_quota", nil)
	req.Header.Set("Authorization", "Bearer key-acme")
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s /_quota: %v", gw.name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s /_quota: %d %s", gw.name, resp.StatusCode, body)
	}
	var q struct{ Policies []json.RawMessage }
	if err := json.Unmarshal(body, &q); err != nil {
		t.Fatalf("%s /_quota: %v: %s", gw.name, err, body)
	}
	for _, raw := range q.Policies {
		var e regionQuota
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatalf("%s /_quota: %v: %s", gw.name, err, raw)
		}
		if e.Name == "quota" {
			return e
		}
	}
	t.Fatalf("%s /_quota has no policy quota: %s", gw.name, body)
	return regionQuota{}
}

// hgetall returns the hash at key of s (empty when there is none).
func hgetall(t *testing.T, s *redistest.Server, key string) map[string]string {
	t.Helper()
	r, err := s.Do("HGETALL", key)
	if err != nil {
		t.Fatalf("HGETALL %s: %v", key, err)
	}
	out := map[string]string{}
	fs, _ := r.([]any)
	for i := 0; i+1 < len(fs); i += 2 {
		k, _ := fs[i].(string)
		v, _ := fs[i+1].(string)
		out[k] = v
	}
	return out
}

// ownerClaims returns the claims of a key's hash at the global owner
// (fields "r:<region>" = "rate burst expires demand ..."), sorted by region.
func ownerClaims(t *testing.T, h map[string]string) []regionGrant {
	t.Helper()
	var out []regionGrant
	for f, v := range h {
		region, ok := strings.CutPrefix(f, "r:")
		if !ok {
			continue
		}
		var c regionGrant
		var expires int64
		if _, err := fmt.Sscan(v, &c.Rate, &c.Burst, &expires, &c.Demand); err != nil {
			t.Fatalf("claim %q: %v", v, err)
		}
		c.Region = region
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Region < out[j].Region })
	return out
}

// TestRegionsQuotaViews (issue 32, the quota endpoint): with demand in eu
// and us and none in ap, the GET /_quota answer of each region shows, for
// the tenant's cross-region policy, the global owner's state exactly as
// the global Redis holds it (capacity; each region's grant and reported
// demand), read between two identical reads of that hash; the region's
// own grant as its reporter wrote it to the regional Redis, and its
// bucket decided on it; ap, which holds no grant, on its safe share. Cut
// off from the global Redis, eu still answers 200 with its regional view
// and says the global one is unavailable.
func TestRegionsQuotaViews(t *testing.T) {
	b := startRegionBed(t, []int{1, 1, 1})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.drive(t, func() []int { return []int{60, 30, 0} }, stop)
	}()
	defer func() { close(stop); <-done }()

	// The owner's key of the tenant's policy, once eu and us are both
	// granted (past the owner's warm-up, which grants nothing).
	var key string
	granted := func() bool {
		n := 0
		for _, c := range ownerClaims(t, hgetall(t, b.global, key)) {
			if c.Rate > 0 {
				n++
			}
		}
		return n == 2
	}
	deadline := time.Now().Add(4 * regionTTL)
	for key == "" || !granted() {
		if time.Now().After(deadline) {
			t.Fatalf("missed deadline: eu and us not both granted at the global owner within %v", 4*regionTTL)
		}
		time.Sleep(regionInterval / 5) // polling the global Redis
		r, _ := b.global.Do("KEYS", "qg:{regions}:k:*")
		if ks, _ := r.([]any); len(ks) == 1 {
			key, _ = ks[0].(string)
		}
	}
	bucket := strings.TrimPrefix(key, "qg:{regions}:k:")

	for i, name := range b.names {
		gw := b.gws[i][0]
		var q regionQuota
		var held map[string]string
		consistent := false
		// Each read spends one of the caller's 10 quota reads at once
		// (then 2 a second): a read that found the instance behind the
		// regional Redis waits for its next read of the grants.
		for try := 0; try < 8 && !consistent; try++ {
			h1, r1 := hgetall(t, b.global, key), hgetall(t, b.regional[i], "qg:{regions}:grants")
			q = quotaOf(t, gw)
			h2, r2 := hgetall(t, b.global, key), hgetall(t, b.regional[i], "qg:{regions}:grants")
			if !maps.Equal(h1, h2) || !maps.Equal(r1, r2) {
				t.Logf("%s: a report between the reads: read again", name)
				continue
			}
			rq := q.Regions
			if rq == nil {
				t.Fatalf("%s: /_quota entry without regions: %+v", name, q)
			}
			// The global view is read from the global Redis: it is h1.
			g := rq.Global
			if !g.Available || g.Rate != regionRate || g.Burst != regionBurst {
				t.Fatalf("%s: global view %+v, want available, capacity %d/%d", name, g, regionRate, regionBurst)
			}
			want := ownerClaims(t, h1)
			got := make([]regionGrant, len(g.Regions))
			for j, c := range g.Regions {
				got[j] = regionGrant{Region: c.Region, Rate: c.Rate, Burst: c.Burst, Demand: c.Demand}
				if c.Rate > 0 && (c.ExpiresMS <= 0 || c.ExpiresMS > regionTTL.Milliseconds()) {
					t.Errorf("%s: %s's grant expires in %d ms, want in (0, %d]", name, c.Region, c.ExpiresMS, regionTTL.Milliseconds())
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%s: /_quota global claims %+v, the global Redis holds %+v", name, got, want)
			}
			// The regional view: the grant the region's reporter wrote.
			held = r1
			var rate, burst int64
			w, ok := r1[bucket]
			if ok {
				if _, err := fmt.Sscan(w, &rate, &burst); err != nil {
					t.Fatalf("%s: grant %q: %v", name, w, err)
				}
			}
			switch {
			case !ok && rq.Grant == nil:
				consistent = true
			case ok && rq.Grant != nil && rq.Grant.Rate == rate && rq.Grant.Burst == burst:
				consistent = true
			default:
				t.Logf("%s: the instance had not read the region's grant %q yet (it shows %+v): read again", name, w, rq.Grant)
				time.Sleep(regionInterval / 4) // the instances read the grants that often
			}
		}
		if !consistent {
			t.Fatalf("missed deadline: %s: no read of /_quota between two identical reads of the global and regional Redis matched the region's grant (last %+v, regional Redis %v)", name, q.Regions, held)
		}
		rq := q.Regions
		t.Logf("%s: grant %+v, safe share %v, bucket limit %d remaining %d; global %d/%d, claims %+v",
			name, rq.Grant, rq.SafeShare, q.Limit, q.Remaining, rq.Global.Rate, rq.Global.Burst, rq.Global.Regions)
		if rq.Region != name {
			t.Errorf("%s: regions.region = %q", name, rq.Region)
		}
		switch name {
		case "ap": // no demand: no grant, on its safe share
			if rq.Grant != nil || !rq.SafeShare || q.Limit != int64(regionSafe*regionBurst) {
				t.Errorf("ap: grant %+v, safe_share %v, limit %d; want none, true, %d", rq.Grant, rq.SafeShare, q.Limit, int64(regionSafe*regionBurst))
			}
		default:
			if rq.Grant == nil || rq.Grant.Rate == 0 {
				t.Fatalf("%s: no grant after its demand: %+v", name, rq)
			}
			if !rq.SafeShare && q.Limit != rq.Grant.Burst {
				t.Errorf("%s: bucket limit %d, want its grant's burst %d", name, q.Limit, rq.Grant.Burst)
			}
		}
	}

	// Cut off: the regional view, the global one unavailable, never a 500.
	b.relays[0].blackhole()
	defer b.relays[0].heal()
	q := quotaOf(t, b.gws[0][0])
	if q.Regions == nil || q.Regions.Region != "eu" || q.Regions.Global.Available || q.Regions.Global.Reason != "unreachable" {
		t.Fatalf("eu cut off: /_quota regions %+v, want eu's view with the global one unreachable", q.Regions)
	}
	t.Logf("eu cut off: grant %+v, safe share %v, global %+v", q.Regions.Grant, q.Regions.SafeShare, q.Regions.Global)
	if v := b.gws[0][0].metric("quotagate_store_breaker_state"); v != 0 {
		t.Errorf("eu: quotagate_store_breaker_state = %v after a failed global read, want 0 (closed)", v)
	}
}

// TestRegionsQuotaGlobalReadBudgeted: the global view's read spends one
// read of the gateway-wide budget, after the regional read's. With a
// budget of one read (burst 1, 1 a second), a GET /_quota is 200 with the
// regional view and the global one unavailable for the budget, without a
// call to the global Redis (its command count is unchanged).
func TestRegionsQuotaGlobalReadBudgeted(t *testing.T) {
	b := startRegionBed(t, []int{1, 1, 1}, func(c *gwConfig) {
		c.Server.QuotaReads = map[string]int{"rate": 1, "burst": 1, "max_items": 100}
	})
	calls := func() string {
		r, err := b.global.Do("INFO", "commandstats")
		if err != nil {
			t.Fatal(err)
		}
		s, _ := r.(string)
		// The regions' reports go on (none is due before lease_ttl with no
		// demand: no key was asked for); HGETALL is the global read's.
		for line := range strings.SplitSeq(s, "\n") {
			if strings.HasPrefix(line, "cmdstat_hgetall:") {
				return strings.TrimSpace(line)
			}
		}
		return ""
	}
	before := calls()
	q := quotaOf(t, b.gws[0][0])
	if q.Regions == nil || q.Regions.Region != "eu" || q.Regions.Global.Available || q.Regions.Global.Reason != "budget" {
		t.Fatalf("/_quota regions %+v, want eu's view with the global one unavailable for the budget", q.Regions)
	}
	if q.Limit != int64(regionSafe*regionBurst) || !q.Regions.SafeShare || q.Regions.Grant != nil {
		t.Errorf("eu before any demand: limit %d, safe share %v, grant %+v; want %d on its safe share, no grant",
			q.Limit, q.Regions.SafeShare, q.Regions.Grant, int64(regionSafe*regionBurst))
	}
	if after := calls(); after != before {
		t.Errorf("the global Redis ran HGETALL for a read the budget refused: %q, then %q", before, after)
	}
}
