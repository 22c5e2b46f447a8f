package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
)

// The regions topology of the chaos suite: three regions (eu, us, ap),
// each a regional redis-server and one gateway (its place in the fleet),
// and one global redis-server, the owner of the cross-region quotas,
// that each region reaches through a relay of its own (as in
// regions_test.go). The ordinary routes' tenants live in one region each
// (t0 in eu, and so on; plant in eu, served by the planted build there):
// their keys are that region's. The cross-region tenant x calls route xr,
// one token bucket across the regions (regionRate a second, burst
// regionBurst, safe_share regionSafe, reports every regionInterval,
// grants for regionTTL), from every region, at twice the limit split
// 70/20/10. The nemesis cuts a region's link to the global Redis, slows
// it, pauses the global Redis (every region cut off), flushes scripts,
// reloads, kills gateways and stalls clients; the checker holds xr to the
// partition bound of docs/concepts/regions.md.

const (
	chaosRegionCount = 3
	crossTenant      = "x"
	crossRoute       = "xr"
)

// regionsKinds are the faults of the regions topology.
var regionsKinds = []chaosKind{
	{"region-partition", 4}, // region #'s link to the global Redis black-holed for For (past lease_ttl it is on its safe share)
	{"region-latency", 2},   // Param more latency on that link for For
	{"global-pause", 1},     // SIGSTOP the global Redis for For: every region cut off
	{"flush", 2},            // FUNCTION FLUSH and SCRIPT FLUSH on every redis-server every 20 ms for For
	{"reload", 1},
	{"reload-invalid", 1},
	{"gateway-kill", 2}, // SIGKILL region #'s gateway (its reporter); a new one starts after For
	{"stall-body", 1},
	{"hang-up", 1},
}

// chaosRegions is the regions topology's Redis: a regional server per
// region, the global one, and region k's relay to it.
type chaosRegions struct {
	names    []string
	regional []*redistest.Server
	global   *redistest.Server
	relays   []*tcpProxy
	// paused: the global Redis is SIGSTOPped (not to be flushed).
	mu     sync.Mutex
	paused bool
}

func startChaosRegions(t testing.TB) chaosBackend {
	t.Helper()
	c := &chaosRegions{names: []string{"eu", "us", "ap"}, global: redistest.StartStandalone(t)}
	for range c.names {
		c.regional = append(c.regional, redistest.StartStandalone(t))
		c.relays = append(c.relays, startTCPProxy(t, c.global.Addr))
	}
	return c
}

// configs returns each region's config: its regional Redis, its relay to
// the global one, the cross-region policy and route. base builds a fresh
// config on the given store addresses.
func (c *chaosRegions) configs(base func(addrs []string) *gwConfig, _ int) []*gwConfig {
	var out []*gwConfig
	for k, name := range c.names {
		cfg := base([]string{c.regional[k].Addr})
		cfg.Store.FleetSize = 1
		cfg.Store.Region = name
		cfg.Store.Global = &globalCfg{Redis: redisCfg{Addrs: []string{c.relays[k].Addr}, Timeout: "300ms"},
			ReportInterval: regionInterval.String(), LeaseTTL: regionTTL.String()}
		cfg.addKey("key-"+crossTenant, crossTenant, "std")
		cfg.Policies[crossRoute] = policyCfg{OnStoreError: "closed", Limits: map[string]limitCfg{"std": bucket(regionRate, "1s", regionBurst)},
			Regions: &regionsCfg{Mode: "leased", SafeShare: regionSafe}}
		cfg.route(crossRoute, "GET", "/"+crossRoute+"/{rest...}", 1, crossRoute)
		out = append(out, cfg)
	}
	return out
}

// settle heals every relay; the servers need nothing more.
func (c *chaosRegions) settle() error {
	for _, p := range c.relays {
		p.heal()
	}
	return nil
}

// keys returns every key of the regional servers and the global one with
// its TTL in ms, but the owner's epoch, which lasts by design (it says
// when the owner first saw a report: a global Redis restarted empty
// starts a new one, docs/concepts/regions.md).
func (c *chaosRegions) keys(t testing.TB) map[string]int64 {
	out := map[string]int64{}
	for k, s := range c.regional {
		for name, ttl := range serverKeys(t, s) {
			out[c.names[k]+" "+name] = ttl
		}
	}
	for name, ttl := range serverKeys(t, c.global) {
		if !strings.HasSuffix(name, "{regions}:epoch") {
			out["global "+name] = ttl
		}
	}
	return out
}

// serverKeys returns s's keys with their TTL in ms (-1: none).
func serverKeys(t testing.TB, s *redistest.Server) map[string]int64 {
	out := map[string]int64{}
	v, err := s.Do("KEYS", "*")
	if err != nil {
		t.Errorf("chaos: KEYS on %s: %v", s.Addr, err)
		return out
	}
	ks, _ := v.([]any)
	for _, k := range ks {
		name, _ := k.(string)
		ttl, _ := s.Do("PTTL", name)
		n, _ := ttl.(int64)
		out[name] = n
	}
	return out
}

// servers returns every redis-server not paused.
func (c *chaosRegions) servers() []*redistest.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := append([]*redistest.Server(nil), c.regional...)
	if !c.paused {
		out = append(out, c.global)
	}
	return out
}

// do carries out the faults of the regions topology that the others do
// not have.
func (c *chaosRegions) do(n *chaosNemesis, e chaosEvent) (string, error) {
	switch e.Kind {
	case "region-partition", "region-latency":
		relay := c.relays[e.Range]
		lock := n.relayLock(relay)
		if !lock.TryLock() {
			return "", fmt.Errorf("%s's link busy", c.names[e.Range])
		}
		defer lock.Unlock()
		if e.Kind == "region-partition" {
			relay.blackhole()
		} else {
			relay.setDelay(e.Param)
		}
		time.Sleep(e.For) // the fault's length
		relay.heal()
		return c.names[e.Range] + " cut off from the global Redis", nil
	case "global-pause":
		c.mu.Lock()
		if c.paused {
			c.mu.Unlock()
			return "", fmt.Errorf("global Redis paused already")
		}
		c.paused = true
		c.mu.Unlock()
		c.global.Pause()
		time.Sleep(e.For) // the fault's length
		c.global.Resume()
		c.mu.Lock()
		c.paused = false
		c.mu.Unlock()
		return "every region cut off", nil
	}
	return "", fmt.Errorf("unknown fault %q", e.Kind)
}

// safeWindows returns when each region may be on its safe share for the
// cross-region key: from the start of the traffic until the owner's
// warm-up has passed and grants were made (lease_ttl and three report
// intervals), and from the start of a fault that can cut a region off
// from its grants (its link cut or slowed past the global timeout, the
// global Redis paused or its scripts flushed, its only gateway, the
// reporter, killed) until it is granted again, lease_ttl and three report
// intervals after the fault ends (regions_test.go holds the same).
func regionSafeWindows(start time.Time, faults []chaosFault) []safeWindow {
	regrant := regionTTL + 3*regionInterval
	out := []safeWindow{{Region: -1, From: start, To: start.Add(regrant), Class: "warm-up"}}
	for _, f := range faults {
		switch f.Class {
		case "region-partition", "region-latency", "gateway-kill":
			out = append(out, safeWindow{Region: f.Range, From: f.Start, To: f.End.Add(regrant), Class: f.Class})
		case "global-pause", "flush":
			out = append(out, safeWindow{Region: -1, From: f.Start, To: f.End.Add(regrant), Class: f.Class})
		}
	}
	return out
}

// crossLoads are the cross-region tenant's requests per second from each
// region: twice the limit, split 70/20/10.
func crossLoads() []int {
	return []int{2 * regionRate * 70 / 100, 2 * regionRate * 20 / 100, 2 * regionRate * 10 / 100}
}
