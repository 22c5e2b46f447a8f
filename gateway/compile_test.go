package gateway

import (
	"strings"
	"testing"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/routes"
	"github.com/quotagate/quotagate/usage"
)

// loadBase loads baseConfig as the gateway tests do, for a test that edits
// the validated value before compiling it.
func loadBase(t *testing.T) *config.Config {
	t.Helper()
	path := writeConfig(t, renderConfig(baseConfig, "http://127.0.0.1:9", "http://127.0.0.1:9"))
	cfg, err := config.Load(path, testGetenv)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// A configuration that reaches the gateway without passing Validate (built
// in code, or edited after) used to lose a policy whose algorithm or scope
// did not parse: the route then went unlimited. New and Reload run
// Validate themselves, so such a configuration is refused with the field
// path a file would get, and a reload keeps the live configuration. The
// compiled pipeline trusts what Validate checked and checks nothing again.
func TestCompileRefusesWhatItCannotEnforce(t *testing.T) {
	cases := []struct {
		name string
		edit func(*config.Config)
		want string
	}{
		{"unknown algorithm", func(c *config.Config) { setPolicy(c, "transfers", func(p *config.Policy) { p.Algorithm = 0 }) },
			"policies.transfers.algorithm: must be token_bucket"},
		{"out of range algorithm", func(c *config.Config) { setPolicy(c, "tenant", func(p *config.Policy) { p.Algorithm = 9 }) },
			"policies.tenant.algorithm: must be token_bucket"},
		{"unknown scope", func(c *config.Config) { setPolicy(c, "transfers", func(p *config.Policy) { p.Scope = 0 }) },
			"policies.transfers.scope: must be tenant"},
		{"unknown on_store_error", func(c *config.Config) { setPolicy(c, "tenant", func(p *config.Policy) { p.OnStoreError = 0 }) },
			"policies.tenant.on_store_error: must be open"},
		{"limit the store refuses", func(c *config.Config) {
			setPolicy(c, "tenant", func(p *config.Policy) { p.Limits["free"] = config.Limit{Rate: 1, Per: 0, Burst: 5} })
		}, "policies.tenant.limits.free.per: must be > 0"},
		{"cost above capacity", func(c *config.Config) { c.Routes[0].Cost = 50 }, `routes[0].cost: 50 exceeds the capacity 5 of policy "tenant" for tier "anonymous"`},
		{"missing policy", func(c *config.Config) { c.Routes[1].Policies = []config.PolicyRef{{Name: "nope"}} }, `routes[1].policies[0]: unknown policy "nope"`},
		{"zero cost", func(c *config.Config) { c.Routes[1].Cost = 0 }, "routes[1].cost: must be >= 1"},
		{"zero fleet", func(c *config.Config) { c.Store.FleetSize = 0 }, "store.fleet_size: must be >= 1"},
		{"no key prefix", func(c *config.Config) { c.Store.Redis.KeyPrefix = "" }, "store.redis.key_prefix: must be"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := loadBase(t)
			tc.edit(cfg)
			gw, err := New(cfg, Options{Getenv: testGetenv})
			if err == nil {
				_ = gw.Close()
				t.Fatalf("New accepted the configuration, want an error mentioning %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v\nwant it to mention %q", err, tc.want)
			}

			live, err := New(loadBase(t), Options{Getenv: testGetenv})
			if err != nil {
				t.Fatal(err)
			}
			defer live.Close()
			if err := live.Reload(cfg, 0); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Reload: %v, want an error mentioning %q", err, tc.want)
			}
			if got := len(live.live.Load().routes[0].policyFor("free", usage.Other)); got != 2 {
				t.Errorf("after the refused reload, transfers.create has %d policies for free, want the live 2", got)
			}
		})
	}
}

func setPolicy(c *config.Config, name string, edit func(*config.Policy)) {
	p := c.Policies[name]
	edit(&p)
	c.Policies[name] = p
}

// Compiling binds every policy of a route with its typed values, and the
// local share never below the route's cost.
func TestCompileBindsTypedPolicies(t *testing.T) {
	cfg := loadBase(t)
	cfg.Store.FleetSize = 4
	gw, err := New(cfg, Options{Getenv: testGetenv})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	ps := gw.live.Load().routes[0].policyFor("enterprise", usage.Other)
	if len(ps) != 2 {
		t.Fatalf("transfers.create binds %d policies for enterprise, want 2", len(ps))
	}
	tenant, transfers := ps[0], ps[1] // both per subject: in the route's order
	if tenant.name != "tenant" || tenant.scope != routes.ScopeTenant || tenant.onError != ratelimit.OnErrorOpen ||
		tenant.algorithm != ratelimit.TokenBucket || tenant.limit.Burst != 100 || tenant.share.Burst != 25 {
		t.Errorf("tenant bound as %+v", tenant)
	}
	if transfers.name != "transfers" || transfers.scope != routes.ScopeTenantRoute || transfers.onError != ratelimit.OnErrorClosed ||
		transfers.share.Burst != 5 { // 10/4 rounds up to 3, below the route's cost of 5
		t.Errorf("transfers bound as %+v", transfers)
	}
}
