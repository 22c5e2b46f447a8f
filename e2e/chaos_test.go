package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/internal/redistest"
)

// The chaos suite: a store topology (a Redis Cluster of 3 primaries with
// a replica each, every node behind a relay; a primary, its replica and
// three Sentinels, chaos_sentinel_test.go; or three regions sharing a
// global owner, chaos_regions_test.go), 3 gateway processes, an upstream
// that records every admission, closed- and open-loop callers over a
// strict token bucket, a concurrency policy, a settled cost route, a
// sliding window, a leased hot key and a calendar day's quota (and on
// regions a cross-region quota), and a nemesis that carries out a
// schedule of overlapping faults drawn from a seed. The checker
// (chaos_check_test.go) then holds the record to the bounds the docs
// state. docs/chaos.md has the results and the commands.

// The limits of the run, per tenant.
const (
	chaosTBRate, chaosTBBurst     = 10, 10              // tb: token bucket, cost 1
	chaosCCMax                    = 2                   // cc: concurrency
	chaosCostRate, chaosCostBurst = 300, 300            // cost: token bucket, reserve from X-Max-Tokens, settled
	chaosSWRate, chaosSWPer       = 20, 2 * time.Second // sw: sliding window, 10 buckets
	chaosLeaseRate                = 30                  // lease: token bucket of burst 30, leased in blocks of up to 5
	chaosCalRate                  = 150                 // cal: a calendar day's quota
	chaosSlotTTL                  = 5 * time.Second
	chaosStoreTimeout             = 250 * time.Millisecond
)

// chaosLimits are the run's limits as the checker reads them.
var chaosLimits = []chaosLimit{
	{Route: "tb", Kind: "bucket", Burst: chaosTBBurst, Rate: chaosTBRate},
	{Route: "cc", Kind: "concurrency", Max: chaosCCMax},
	{Route: "cost", Kind: "bucket", Burst: chaosCostBurst, Rate: chaosCostRate},
	{Route: "sw", Kind: "window", Rate: chaosSWRate, Per: chaosSWPer},
	{Route: "lease", Kind: "bucket", Burst: chaosLeaseRate, Rate: chaosLeaseRate},
	{Route: "cal", Kind: "calendar", Rate: chaosCalRate},
	{Route: plantRoute, Kind: "bucket", Burst: 2, Rate: 2},
	{Route: crossRoute, Kind: "regions", Burst: regionBurst, Rate: regionRate, Safe: regionSafe}, // the regions topology's
}

// chaosConfig is the gateways' config: every policy fails closed, so any
// admission beyond a bound is an over-admission.
func chaosConfig(upstreamURL string, seeds []string, tenants []string) *gwConfig {
	c := limiterConfig(upstreamURL, nil, tenants...)
	c.useRedis(chaosStoreTimeout.String(), seeds...)
	c.Store.FleetSize = 3
	c.Server.BodyReadTimeout = "1s"
	c.Upstreams["up"] = upstreamCfg{URL: upstreamURL, Timeout: "10s"}
	c.Policies["tb"] = policyCfg{OnStoreError: "closed", Limits: map[string]limitCfg{"std": bucket(chaosTBRate, "1s", chaosTBBurst)}}
	c.Policies["cc"] = policyCfg{Algorithm: "concurrency", SlotTTL: chaosSlotTTL.String(), OnStoreError: "closed",
		Limits: map[string]limitCfg{"std": {Max: chaosCCMax}}}
	c.Policies["cost"] = policyCfg{OnStoreError: "closed", Limits: map[string]limitCfg{"std": bucket(chaosCostRate, "1s", chaosCostBurst)}}
	c.Policies["sw"] = policyCfg{Algorithm: "sliding_window", OnStoreError: "closed",
		Limits: map[string]limitCfg{"std": {Rate: chaosSWRate, Per: chaosSWPer.String(), Buckets: 10}}}
	c.Policies["lease"] = policyCfg{OnStoreError: "closed", Lease: &leaseCfg{MaxBlock: 5, TTL: "1s", Instances: 3},
		Limits: map[string]limitCfg{"std": bucket(chaosLeaseRate, "1s", chaosLeaseRate)}}
	c.Policies["cal"] = policyCfg{Algorithm: "fixed_window", OnStoreError: "closed",
		Limits: map[string]limitCfg{"std": {Rate: chaosCalRate, Calendar: map[string]any{"unit": "day", "time_zone": "UTC"}}}}
	c.Policies[plantRoute] = policyCfg{OnStoreError: "closed", Limits: map[string]limitCfg{"std": bucket(2, "1s", 2)}}
	c.route(plantRoute, "GET", "/"+plantRoute+"/{rest...}", 1, plantRoute)
	c.route("sw", "GET", "/sw/{rest...}", 1, "sw")
	c.route("lease", "GET", "/lease/{rest...}", 1, "lease")
	c.route("cal", "GET", "/cal/{rest...}", 1, "cal")
	c.route("tb", "GET", "/tb/{rest...}", 1, "tb")
	c.route("cc", "GET", "/cc/{rest...}", 1, "cc")
	c.Routes = append(c.Routes, routeCfg{Name: "cost", Method: "POST", Path: "/cost/{rest...}", Upstream: "up", Policies: []any{"cost"},
		Cost: map[string]any{"reserve": 50, "max": 100, "reserve_from": map[string]any{"header": "X-Max-Tokens"},
			"settle_from": map[string]any{"header": "X-Usage-Total-Tokens"}}})
	return c
}

// tenantRange returns the slot range (of ranges equal ones) that holds an
// API-key tenant's keys: their hash tag is t: and 16 hex digits of
// SHA-256("key:" + tenant) (docs/concepts/pipeline.md, Store keys).
func tenantRange(tenant string, ranges int) int {
	sum := sha256.Sum256([]byte("key:" + tenant))
	slot := redistest.Slot("{t:" + hex.EncodeToString(sum[:])[:16] + "}")
	for i := ranges - 1; i >= 0; i-- {
		if slot >= i*redistest.NumSlots/ranges {
			return i
		}
	}
	return 0
}

// chaosTenants returns one tenant per range, and the range of each.
func chaosTenants(ranges int) ([]string, map[string]int) {
	var out []string
	at := map[string]int{}
	for n := 0; len(out) < ranges; n++ {
		tn := "t" + strconv.Itoa(n)
		r := tenantRange(tn, ranges)
		if _, taken := rangeTaken(at, r); !taken {
			out = append(out, tn)
			at[tn] = r
		}
	}
	return out, at
}

func rangeTaken(at map[string]int, r int) (string, bool) {
	for tn, x := range at {
		if x == r {
			return tn, true
		}
	}
	return "", false
}

// plantTenant's plantRoute key (a token bucket of burst 2 and 2 a second,
// which only that tenant calls) is served by a gateway of the planted
// build (go build -tags quotagate_plant: gateway/plant_on.go), which turns
// the first store denial of each second into an admission: an
// over-admission of one a second that every run's checker must find (and
// find there only: the other routes go to the fleet of the release
// build). A small bucket keeps it found however many lossy promotions its
// range sees (each allows one burst more); the unit test plants the same
// in a bucket of 10.
const (
	plantTenant = "plant"
	plantRoute  = "slow"
)

// TestChaos runs the schedule of each seed (flags -chaos.seeds,
// -chaos.duration) and fails a seed whose record breaks the checker's
// rules: a strict bound exceeded beyond its documented allowance, a call
// unanswered (other than those a gateway kill cut), a wrong status, a key
// left behind. The planted over-admission must be found.
func TestChaos(t *testing.T) {
	plan, d := chaosPlan(t)
	for _, p := range plan {
		for _, seed := range p.seeds {
			t.Run(fmt.Sprintf("%s/seed=%d", p.topo.name, seed), func(t *testing.T) {
				chaosRun(t, p.topo, seed, d, chaosSchedule(seed, d, p.topo, chaosGateways))
			})
		}
	}
}

// TestChaosFailoverWindow measures what a promotion that loses
// acknowledged writes costs: on each range in turn the replica is paused
// (lagging) for 0.5, 1 and 2 s while the primary goes on deciding, then
// the primary is SIGKILLed and the replica promoted (TAKEOVER). Each
// promotion hands the range's keys back their state of the pause's
// start. The checker allows one burst (tb, cost) or max slots (cc) per
// key for each; the units admitted above the bound are the measured
// window, logged, and must stay within it.
func TestChaosFailoverWindow(t *testing.T) {
	var events []chaosEvent
	for i, lag := range []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second} {
		events = append(events, chaosEvent{At: time.Duration(2+4*i) * time.Second, Kind: "kill-lagging", Range: i, For: lag})
	}
	res := chaosRun(t, chaosCluster, 0, 14*time.Second, events)
	if res.done["kill-lagging"] != len(events) {
		t.Errorf("%d of %d lagging kills carried out", res.done["kill-lagging"], len(events))
	}
	// One promotion per range: each key's excess is that promotion's.
	allow := map[string]int64{}
	for _, l := range chaosLimits {
		allow[l.Route] = l.Burst + int64(l.Max) // buckets; concurrency
		if l.Kind == "window" || l.Kind == "calendar" {
			allow[l.Route] = int64(l.Rate)
		}
	}
	var b strings.Builder
	b.WriteString("| replica behind | route | units over the bound (requests for cc) | allowance |\n|---|---|---|---|\n")
	for _, e := range events {
		for _, k := range res.keys {
			if k.Tenant != plantTenant && res.rangeOf[k.Tenant] == e.Range {
				fmt.Fprintf(&b, "| %v | %s | %d | %d |\n", e.For, k.Route, k.Raw, allow[k.Route])
			}
		}
	}
	t.Logf("failover window:\n%s", b.String())
}

// The shape of a chaos run.
const chaosRanges, chaosGateways = 3, 3

// plantSpec is the planted build: the release build's flags with the
// quotagate_plant tag (gateway/plant_on.go: the first store denial of each
// second is admitted).
var plantSpec = proctest.Spec{
	Flags:   append([]string{"-tags", "quotagate_plant"}, proctest.Dockerfile.Flags...),
	Env:     proctest.Dockerfile.Env,
	Package: proctest.Dockerfile.Package,
}

// startPlantGateway starts a gateway of the planted build on cfg (read
// once: reloads do not reach it).
func startPlantGateway(t testing.TB, cfg *gwConfig) *chaosInstance {
	t.Helper()
	g := launchGatewayBin(t, proctest.Build(t, plantSpec), "plant", cfg)
	g.proc.WaitReady(0)
	return &chaosInstance{id: -1, g: g, url: g.URL}
}

// chaosRun runs events with the traffic for d on topo and checks the
// record (seed seeds the callers' draws); it returns the figures.
func chaosRun(t *testing.T, topo chaosTopology, seed uint64, d time.Duration, events []chaosEvent) chaosResult {
	ranges, nGateways := topo.ranges, chaosGateways
	var sched strings.Builder
	for _, e := range events {
		sched.WriteString("\n  " + e.String())
	}
	t.Logf("%s, seed %d, %v of traffic, %d faults:%s", topo.name, seed, d, len(events), sched.String())

	began := time.Now()
	store := topo.start(t)
	t.Logf("%s up after %v", topo.name, time.Since(began).Round(time.Millisecond))
	up := startChaosUpstream(t)
	tenants, rangeOf := chaosTenants(ranges)
	rangeOf[plantTenant] = tenantRange(plantTenant, ranges)
	all := append(append([]string(nil), tenants...), plantTenant)
	regions, _ := store.(*chaosRegions)
	if regions != nil {
		rangeOf[plantTenant] = 0 // the planted build runs in eu
	}
	cfgs := store.configs(func(addrs []string) *gwConfig { return chaosConfig(up.srv.URL, addrs, all) }, nGateways)
	fleet := startChaosFleet(t, cfgs)
	caller := &chaosCaller{fleet: fleet, client: newClient(64), plant: startPlantGateway(t, cfgs[0])}
	caller.client.Timeout = 10 * time.Second
	nem := &chaosNemesis{fleet: fleet, caller: caller, tenant: func(n int) string { return all[n%len(all)] }}
	if regions != nil {
		// Every request goes to its region's gateway: a tenant's to its
		// own, the cross-region tenant's to the one it is sent in.
		nem.regions = regions
		caller.home = func(q chaosReq) int {
			if q.tenant == crossTenant {
				return q.region
			}
			return rangeOf[q.tenant]
		}
	} else {
		nem.redis = store.(*chaosRedis)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var seq atomic.Int64
	closedLoop := func(q func(r *rand.Rand) chaosReq, pace time.Duration, id uint64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, id))
			for {
				select {
				case <-stop:
					return
				default:
				}
				caller.send(q(r), int(seq.Add(1)))
				time.Sleep(pace) // the caller's think time
			}
		}()
	}
	openLoop := func(q chaosReq, every time.Duration) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(every)
			defer tick.Stop()
			var inflight sync.WaitGroup
			defer inflight.Wait()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					inflight.Add(1)
					go func() { defer inflight.Done(); caller.send(q, int(seq.Add(1))) }()
				}
			}
		}()
	}
	for k, tn := range all {
		id := uint64(k) * 16
		tbq := chaosReq{tenant: tn, route: "tb", path: "/tb/x"}
		closedLoop(func(*rand.Rand) chaosReq { return tbq }, 50*time.Millisecond, id)
		openLoop(tbq, 100*time.Millisecond)
		for w := range 3 {
			closedLoop(func(r *rand.Rand) chaosReq {
				return chaosReq{tenant: tn, route: "cc", path: "/cc/" + strconv.Itoa(50+r.IntN(100))}
			}, 50*time.Millisecond, id+1+uint64(w))
		}
		closedLoop(func(r *rand.Rand) chaosReq {
			reserve := 10 + r.IntN(91)
			return chaosReq{tenant: tn, route: "cost", path: "/cost/x", header: map[string]string{
				"X-Max-Tokens": strconv.Itoa(reserve), "X-Chaos-Usage": strconv.Itoa(1 + r.IntN(reserve))}}
		}, 50*time.Millisecond, id+8)
		swq := chaosReq{tenant: tn, route: "sw", path: "/sw/x"}
		closedLoop(func(*rand.Rand) chaosReq { return swq }, 80*time.Millisecond, id+9)
		lq := chaosReq{tenant: tn, route: "lease", path: "/lease/x"}
		closedLoop(func(*rand.Rand) chaosReq { return lq }, 50*time.Millisecond, id+10)
		closedLoop(func(*rand.Rand) chaosReq { return lq }, 50*time.Millisecond, id+11)
		calq := chaosReq{tenant: tn, route: "cal", path: "/cal/x"}
		closedLoop(func(*rand.Rand) chaosReq { return calq }, 100*time.Millisecond, id+12)
	}
	if regions != nil {
		for k, rate := range crossLoads() {
			openLoop(chaosReq{tenant: crossTenant, route: crossRoute, path: "/" + crossRoute + "/x", region: k}, time.Second/time.Duration(rate))
		}
	}
	// The planted over-admission: the plant tenant saturates its slow
	// route through the gateway of the planted build.
	plantq := chaosReq{tenant: plantTenant, route: plantRoute, path: "/" + plantRoute + "/x"}
	closedLoop(func(*rand.Rand) chaosReq { return plantq }, 50*time.Millisecond, 1000)

	start := time.Now()
	nem.run(start, events)
	time.Sleep(time.Until(start.Add(d))) // the rest of the traffic time
	close(stop)
	wg.Wait()
	end := time.Now()
	t.Logf("traffic ended after %v", end.Sub(start).Round(time.Millisecond))

	// Recovery: every link healed, the store settled, every slot
	// released (or expired) within slot_ttl, every key with an expiry.
	if err := store.settle(); err != nil {
		proctest.Overrun(t, "chaos: %v", err)
	}
	t.Logf("%s settled %v after the traffic", topo.name, time.Since(end).Round(time.Millisecond))
	var left []string
	deadline := time.Now().Add(chaosSlotTTL + 2*time.Second)
	for {
		left = left[:0]
		for k, ttl := range store.keys(t) {
			if strings.HasSuffix(k, ":cc") || ttl == -1 {
				left = append(left, fmt.Sprintf("%s (ttl %dms)", k, ttl))
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // polling the Cluster
	}
	sort.Strings(left)

	admits := up.record()
	in := chaosInput{
		Limits: chaosLimits, RangeOf: rangeOf, Admits: admits, Calls: caller.log(), Faults: nem.faults,
		Jitter: 250 * time.Millisecond, CancelSlack: 250 * time.Millisecond, Deadline: 3 * time.Second, KeysLeft: left,
		Allowed:   map[string][]int{"stall": {408, 429, 503}},
		Saturated: []string{"tb"},
	}
	if regions != nil {
		in.SafeShare = regionSafeWindows(start, nem.faults)
	}
	rep := check(in)
	res := chaosSummarize(topo.name, seed, d, events, nem.faults, rep, in)
	t.Log(res.text())
	chaosPublish(t, res)

	// The planted key must fail, and nothing else.
	var failures []string
	plantFound := false
	for _, f := range rep.failed() {
		if strings.HasPrefix(f, plantTenant+" "+plantRoute+" ") {
			plantFound = true
			continue
		}
		failures = append(failures, f)
	}
	if !plantFound {
		t.Errorf("the checker missed the planted over-admission (one denial a second admitted on %s's %s key by the planted build)", plantTenant, plantRoute)
	}
	for _, f := range failures {
		t.Errorf("chaos seed %d: %s", seed, f)
	}
	if rep.Late > 0 {
		proctest.Overrun(t, "chaos seed %d: %d answers took longer than %v", seed, rep.Late, in.Deadline)
	}
	if u := res.utilisation; u < 0.3 {
		t.Errorf("chaos seed %d: the tb keys got %.0f%% of what their limit allows: the run says little", seed, 100*u)
	}
	{
		for _, f := range nem.faults {
			t.Logf("fault %s #%d %s..%s %s", f.Class, f.Range, f.Start.Format("15:04:05.000"), f.End.Format("15:04:05.000"), f.Note)
		}
	}
	return res
}
