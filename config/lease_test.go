package config

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestLeaseDefaultsAndInstances(t *testing.T) {
	c := mustParse(t, `
store: {fleet_size: 4}
identity: {anonymous: {tier: free}}
tiers: {free: {}}
policies:
  plain:
    limits: {free: {rate: 1, per: 1s, burst: 5}}
  hot:
    lease: {}
    limits: {free: {rate: 1000, per: 1s, burst: 400}}
  tuned:
    lease: {max_block: 20, ttl: 250ms, instances: 2}
    limits: {free: {rate: 1000, per: 1s, burst: 400}}
upstreams: {app: {url: "http://127.0.0.1:9001"}}
routes:
  - {name: app.get, method: GET, path: /, upstream: app, cost: 3, policies: [plain, hot, tuned]}
`, noEnv)
	if c.Policies["plain"].Lease != nil {
		t.Errorf("a policy without lease got %+v", c.Policies["plain"].Lease)
	}
	if got, want := *c.Policies["hot"].Lease, (Lease{MaxBlock: 50, TTL: time.Second, Instances: 4}); got != want {
		t.Errorf("lease: {} = %+v, want %+v (defaults, instances from store.fleet_size)", got, want)
	}
	if got, want := *c.Policies["tuned"].Lease, (Lease{MaxBlock: 20, TTL: 250 * time.Millisecond, Instances: 2}); got != want {
		t.Errorf("tuned lease = %+v, want %+v", got, want)
	}
	out, err := json.Marshal(c.Redacted())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"lease":{"auto":false,"instances":2,"max_block":20,"ttl":"250ms"}`) {
		t.Errorf("Redacted lacks the tuned lease: %s", out)
	}
}

// TestLeaseAuto: `lease: auto` is an auto lease with no bound of its own
// (max_block 0), the default TTL and instances from store.fleet_size; the
// mapping form takes auto with its own settings, max_block unbounded
// unless given.
func TestLeaseAuto(t *testing.T) {
	c := mustParse(t, `
store: {fleet_size: 3}
identity: {anonymous: {tier: free}}
tiers: {free: {}}
policies:
  word:
    lease: auto
    limits: {free: {rate: 1000, per: 1s, burst: 400}}
  mapped:
    lease: {auto: true, ttl: 2s}
    limits: {free: {rate: 1000, per: 1s, burst: 400}}
  bounded:
    lease: {auto: true, max_block: 30}
    limits: {free: {rate: 1000, per: 1s, burst: 400}}
upstreams: {app: {url: "http://127.0.0.1:9001"}}
routes:
  - {name: app.get, method: GET, path: /, upstream: app, policies: [word, mapped, bounded]}
`, noEnv)
	for name, want := range map[string]Lease{
		"word":    {Auto: true, TTL: time.Second, Instances: 3},
		"mapped":  {Auto: true, TTL: 2 * time.Second, Instances: 3},
		"bounded": {Auto: true, MaxBlock: 30, TTL: time.Second, Instances: 3},
	} {
		if got := c.Policies[name].Lease; got == nil || *got != want {
			t.Errorf("%s: lease %+v, want %+v", name, got, want)
		}
	}
}
