package config

import (
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

// TestConcurrencyPolicyDefaults: a concurrency policy gets slot_ttl 30s,
// which becomes every limit's Per, and a queue written as {} gets its
// defaults; the limits convert to valid store limits.
func TestConcurrencyPolicyDefaults(t *testing.T) {
	c := mustParse(t, `
identity: {anonymous: {tier: free}}
tiers: {free: {}, pro: {}}
upstreams: {app: {url: "http://127.0.0.1:9001"}}
policies:
  inflight:
    algorithm: concurrency
    limits: {free: {max: 2}, pro: {max: 20}}
  queued:
    algorithm: concurrency
    slot_ttl: 2s
    queue: {}
    limits: {"*": {max: 1}}
routes: [{name: r, method: GET, path: /, upstream: app, cost: 5, policies: [inflight, queued]}]
`, noEnv)
	in := c.Policies["inflight"]
	if in.SlotTTL != 30*time.Second || in.Queue != nil {
		t.Errorf("inflight: slot_ttl %v, queue %+v; want 30s and none", in.SlotTTL, in.Queue)
	}
	if l, ok := in.StoreLimit("pro"); !ok || l.Max != 20 || l.Per != 30*time.Second {
		t.Errorf("inflight's store limit for pro = %+v, want max 20 per 30s", l)
	}
	if l := in.Limits["pro"]; l.Per != 0 {
		t.Errorf("inflight.limits.pro = %+v: Per was filled in the config", l)
	}
	q := c.Policies["queued"]
	if q.SlotTTL != 2*time.Second || q.Queue == nil || q.Queue.Max != 10 || q.Queue.Timeout != time.Second {
		t.Errorf("queued: slot_ttl %v, queue %+v; want 2s and {10 1s}", q.SlotTTL, q.Queue)
	}
	for name, p := range c.Policies {
		for tier := range p.Limits {
			l, _ := p.StoreLimit(tier)
			if err := l.Validate(ratelimit.Concurrency); err != nil {
				t.Errorf("%s.%s: %v", name, tier, err)
			}
		}
	}
}
