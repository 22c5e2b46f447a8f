package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
)

// TestUpstreamBreakerBinary: an upstream path that resets every connection
// opens the upstream's breaker after 3 failures; then the gateway answers
// 503 upstream_unavailable with Retry-After without waiting on the
// upstream, reports the breaker open in its metric, and once the cooldown
// has passed a probe to a healthy path of the same upstream closes it.
func TestUpstreamBreakerBinary(t *testing.T) {
	up := startUpstream(t)
	cfg := limiterConfig(up.URL(), nil, "acme")
	cfg.Upstreams["up"] = upstreamCfg{URL: up.URL(), Timeout: "5s", Breaker: map[string]any{"failures": 3, "cooldown": "2s"}}
	cfg.route("ok", "GET", "/ok/{rest...}", 1)
	cfg.route("reset", "GET", "/reset/{rest...}", 1)
	gw := startGateway(t, "gw", cfg)
	client := newClient(1)
	get := func(path string) outcome {
		return do(client, call{base: gw.URL, path: path, key: "key-acme"}, true)
	}
	for i := range 3 {
		if o := get("/reset/x"); o.status != http.StatusBadGateway {
			t.Fatalf("failure %d: status %d (%v), want 502", i, o.status, o.err)
		}
	}
	o := get("/ok/x")
	if o.status != http.StatusServiceUnavailable || o.header.Get("Retry-After") == "" {
		t.Fatalf("open breaker: %d Retry-After %q, want 503 with Retry-After", o.status, o.header.Get("Retry-After"))
	}
	checkUpstreamAnswer(t, o, "upstream_unavailable")
	if o.latency() >= time.Second {
		proctest.Overrun(t, "the open breaker answered after %v; it contacts nothing", o.latency())
	}
	if v := gw.metric("quotagate_upstream_breaker_state", "upstream=up"); v != 2 {
		t.Errorf("quotagate_upstream_breaker_state{upstream=up} = %v, want 2", v)
	}
	// The cooldown runs on the gateway's own clock: poll for the probe.
	deadline := time.Now().Add(30 * time.Second)
	for {
		o = get("/ok/x")
		if o.status == http.StatusOK {
			break
		}
		if o.status != http.StatusServiceUnavailable {
			t.Fatalf("while open: %d (%v), want 503 or, after the cooldown, 200", o.status, o.err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the breaker never let a probe through")
		}
		time.Sleep(100 * time.Millisecond) // polling pace, not synchronization
	}
	if v := gw.metric("quotagate_upstream_breaker_state", "upstream=up"); v != 0 {
		t.Errorf("after the probe: breaker state %v, want 0", v)
	}
}
