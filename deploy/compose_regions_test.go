package deploy

import (
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/quotagate/quotagate/config"
)

// regionGateways are the gateways of docker-compose.regions.yml by region.
var regionGateways = map[string][]string{
	"eu": {"gw-eu-1", "gw-eu-2"},
	"us": {"gw-us-1", "gw-us-2"},
	"ap": {"gw-ap-1", "gw-ap-2"},
}

// TestComposeRegions checks docker-compose.regions.yml, the three-region
// bed of docs/guides/regions.md, without running docker: the checks every
// Compose file passes; every gateway's config loads and passes `quotagate
// validate` with its service's environment; each gateway is of the region
// its name says, decides on that region's Redis service (a different one
// per region), which it waits for, and reports to the one global Redis,
// which does not evict; two gateways per region, and fleet_size says so;
// a cross-region policy exists; the upstream is a service of the file.
func TestComposeRegions(t *testing.T) {
	const file = "docker-compose.regions.yml"
	c := readComposeFile(t, file)
	img := readImageSpec(t)
	checkComposeBasics(t, c, img)
	var gateways []string
	for _, gws := range regionGateways {
		gateways = append(gateways, gws...)
	}
	slices.Sort(gateways)
	for _, name := range gateways {
		if _, ok := c.Services[name]; !ok {
			t.Fatalf("%s: no service %q", file, name)
		}
	}
	loaded := loadComposeConfigs(t, c, img, dockerBuiltBinary(t), gateways)

	service := func(addr string) string {
		host, _, err := net.SplitHostPort(addr)
		if _, ok := c.Services[host]; err != nil || !ok {
			t.Errorf("%s: address %q is not a service of the file", file, addr)
		}
		return host
	}
	regionalRedis := map[string]string{} // region → its Redis service
	globals := map[string]bool{}
	for region, gws := range regionGateways {
		for _, name := range gws {
			cfg := loaded[name]
			if cfg == nil {
				t.Fatalf("%s: no config loaded", name)
			}
			s := cfg.Store
			if s.Region != region || s.Kind != config.StoreRedis || s.Global == nil {
				t.Errorf("%s: store.region %q kind %q global %v, want region %q on redis with store.global", name, s.Region, s.Kind, s.Global != nil, region)
				continue
			}
			if s.FleetSize != len(gws) {
				t.Errorf("%s: store.fleet_size %d, want the %d gateways of %s", name, s.FleetSize, len(gws), region)
			}
			if len(s.Redis.Addrs) != 1 || len(s.Global.Redis.Addrs) != 1 {
				t.Errorf("%s: store.redis.addrs %v, store.global.redis.addrs %v: want one each", name, s.Redis.Addrs, s.Global.Redis.Addrs)
				continue
			}
			r, g := service(s.Redis.Addrs[0]), service(s.Global.Redis.Addrs[0])
			if prev, ok := regionalRedis[region]; ok && prev != r {
				t.Errorf("%s: decides on %s, another gateway of %s on %s", name, r, region, prev)
			}
			regionalRedis[region] = r
			globals[g] = true
			for _, dep := range []string{r, g} {
				if cond := c.Services[name].DependsOn[dep].Condition; cond != "service_healthy" {
					t.Errorf("%s: depends_on %s: condition %q, want service_healthy", name, dep, cond)
				}
			}
			leased := false
			for _, p := range cfg.Policies {
				leased = leased || (p.Regions != nil && p.Regions.Mode == config.RegionsLeased)
			}
			if !leased {
				t.Errorf("%s: no policy with regions: {mode: leased}", name)
			}
			for _, up := range cfg.Upstreams {
				if !strings.HasPrefix(up.URL, "http://") {
					t.Errorf("%s: upstream %s: %q", name, up.Name, up.URL)
					continue
				}
				service(strings.TrimPrefix(up.URL, "http://"))
			}
		}
	}
	seen := map[string]string{}
	for region, r := range regionalRedis {
		if other, dup := seen[r]; dup {
			t.Errorf("regions %s and %s decide on the same Redis %s", region, other, r)
		}
		seen[r] = region
		if globals[r] {
			t.Errorf("region %s decides on %s, the global Redis", region, r)
		}
	}
	if len(regionalRedis) != 3 || len(globals) != 1 {
		t.Fatalf("%d regional Redis services, %d global ones; want 3 and 1", len(regionalRedis), len(globals))
	}
	for g := range globals {
		cmd := c.Services[g].Command
		if i := slices.Index(cmd, "--maxmemory-policy"); i < 0 || i+1 >= len(cmd) || cmd[i+1] != "noeviction" {
			t.Errorf("%s: command %q, want --maxmemory-policy noeviction (an evicted claim is a grant forgotten)", g, cmd)
		}
	}
}
