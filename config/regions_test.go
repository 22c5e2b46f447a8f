package config

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestLoadRegions: the shape of docs/concepts/regions.md loads, with the
// defaults of store.global filled in.
func TestLoadRegions(t *testing.T) {
	c, err := Load(filepath.Join("testdata", "regions", "valid.yaml"), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	g := c.Store.Global
	if c.Store.Region != "eu-west" || g == nil {
		t.Fatalf("store.region %q, store.global %+v", c.Store.Region, g)
	}
	if g.ReportInterval != time.Second || g.LeaseTTL != 5*time.Second || g.Redis.Timeout != 300*time.Millisecond || g.Redis.KeyPrefix != "qg" {
		t.Errorf("store.global defaults: %+v", g)
	}
	r := c.Policies["enterprise-quota"].Regions
	if r == nil || r.Mode != RegionsLeased || r.SafeShare != 0.2 {
		t.Errorf("policies.enterprise-quota.regions = %+v", r)
	}
}

// TestLoadRegionsInvalid: each fixture of testdata/regions but valid.yaml
// is refused with every problem, by path.
func TestLoadRegionsInvalid(t *testing.T) {
	cases := map[string][]string{
		"no_region.yaml": {
			`store.global.lease_ttl: must be >= 3 × report_interval + redis.timeout (10.03s), got 20ms: a dead reporter is replaced within it`,
			`store.global.redis.addrs[0]: must be host:port, such as 127.0.0.1:6379, got "nowhere"`,
			`store.global.redis.timeout: must be at most 5s, got 10s`,
			`store.global.report_interval: must be >= 50ms, got 10ms`,
			`store.kind: must be "redis" when store.global is set: a region decides on its own Redis`,
			`store.region: region name must be 1 to 64 characters of a-z, 0-9, '_', '.' and '-'`,
		},
		"bad_policy.yaml": {
			`policies.share.regions: needs store.global: the owner that grants each region its share`,
			`policies.share.regions.safe_share: must be a number, got "lots"`,
			`policies.windowed.limits.free: rate and burst must be at most 67108864 for a policy shared across regions`,
			`policies.windowed.regions: a shadow policy cannot be shared across regions`,
			`policies.windowed.regions: needs store.global: the owner that grants each region its share`,
			`policies.windowed.regions: only token_bucket policies can be shared across regions, not fixed_window`,
			`policies.windowed.regions.mode: must be leased, got "borrowed"`,
			`policies.windowed.regions.safe_share: must be in [0, 1], got 1.5`,
		},
	}
	for name, want := range cases {
		t.Run(strings.TrimSuffix(name, ".yaml"), func(t *testing.T) {
			_, err := Load(filepath.Join("testdata", "regions", name), noEnv)
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("Load error = %v (%T), want Errors", err, err)
			}
			var got []string
			for _, e := range es {
				got = append(got, e.Error())
			}
			if !slices.Equal(got, want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}
