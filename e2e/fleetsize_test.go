package e2e

import (
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
)

// waitFleetSize polls g's quotagate_fleet_size until it is want. The
// heartbeats run on real time, so a slow machine shows as a missed
// deadline, not as a wrong size.
func waitFleetSize(t *testing.T, g *gateway, want float64) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := g.metric("quotagate_fleet_size")
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("missed deadline: %s reports quotagate_fleet_size %v after 15s, want %v", g.name, got, want)
		}
		time.Sleep(20 * time.Millisecond) // polling an external process
	}
}

// TestFleetSizeFollowsGateways: three gateway processes on one Redis,
// registering with a heartbeat TTL of 1.5s, count 3; one stopped
// gracefully drops out of the others' count; with Redis then killed, the
// local fallback divides the limit by the last count known (2), and
// RateLimit-Policy advertises that share.
func TestFleetSizeFollowsGateways(t *testing.T) {
	rs := redistest.StartStandalone(t)
	up := startUpstream(t)
	cfg := limiterConfig(up.URL(), []string{rs.Addr}, "acme")
	cfg.Store.Fleet = &fleetCfg{TTL: "1500ms"}
	cfg.Policies["shared"] = policyCfg{OnStoreError: "local", Limits: map[string]limitCfg{"std": bucket(1, "1h", 60)}}
	cfg.route("items.get", "GET", "/ok/{rest...}", 1, "shared")
	gws := startGateways(t, 3, cfg)
	for _, g := range gws {
		waitFleetSize(t, g, 3)
	}

	if err := gws[2].proc.Stop(); err != nil {
		t.Fatalf("stopping gw2: %v", err)
	}
	waitFleetSize(t, gws[0], 2)
	waitFleetSize(t, gws[1], 2)

	rs.Kill()
	req, err := http.NewRequest("GET", gws[0].URL+"/ok/1", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", "key-acme")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	policy := resp.Header.Get("RateLimit-Policy")
	m := regexp.MustCompile(`^"shared";q=(\d+)`).FindStringSubmatch(policy)
	if resp.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("with Redis down: %d, RateLimit-Policy %q; want 200 on the local share", resp.StatusCode, policy)
	}
	if q, _ := strconv.Atoi(m[1]); q != 30 {
		t.Fatalf("local share advertised q=%d, want 60/2 = 30 (the last fleet size known)", q)
	}
	if got := gws[0].metric("quotagate_fleet_size"); got != 2 {
		t.Fatalf("quotagate_fleet_size %v during the outage, want the last count 2", got)
	}
}
