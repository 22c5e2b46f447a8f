package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/quotagate/quotagate/internal/redistest"
)

// TestFleetFallbackAcrossUpstreams: two gateways on one Redis serve a
// route that lists two upstreams, ptu (ptu_tpm, 1000 tokens) then paygo
// (paygo_tpm, 600), both with rpm (100), one counter. 30 concurrent
// requests reserving and using 100 tokens each over both gateways: ptu
// serves exactly 10, paygo exactly 6, 14 are denied; rpm is taken exactly
// 16 times, not once per candidate asked. Then a request that does not
// fit ptu's rest is settled on paygo, ptu's counter untouched.
func TestFleetFallbackAcrossUpstreams(t *testing.T) {
	rs := redistest.StartStandalone(t)
	var served [2]atomic.Int64
	ups := make([]*httptest.Server, 2)
	for i := range ups {
		ups[i] = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			served[i].Add(1)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"choices":[],"usage":{"total_tokens":%s}}`, r.URL.Query().Get("u"))
		}))
		t.Cleanup(ups[i].Close)
	}
	cfg := limiterConfig(ups[0].URL, []string{rs.Addr}, "burst", "settle")
	cfg.Upstreams = map[string]upstreamCfg{"ptu": {URL: ups[0].URL, Timeout: "2s"}, "paygo": {URL: ups[1].URL, Timeout: "2s"}}
	cfg.Policies["rpm"] = policyCfg{OnStoreError: "closed", Limits: map[string]limitCfg{"std": bucket(1, "1h", 100)}}
	cfg.Policies["ptu_tpm"] = policyCfg{OnStoreError: "closed", Limits: map[string]limitCfg{"std": bucket(1, "1h", 1000)}}
	cfg.Policies["paygo_tpm"] = policyCfg{OnStoreError: "closed", Limits: map[string]limitCfg{"std": bucket(1, "1h", 600)}}
	cfg.Routes = append(cfg.Routes, routeCfg{Name: "chat", Method: "POST", Path: "/v1/chat",
		Upstreams: []any{
			map[string]any{"upstream": "ptu", "policies": []any{"rpm", map[string]any{"name": "ptu_tpm", "cost": "tokens"}}},
			map[string]any{"upstream": "paygo", "policies": []any{"rpm", map[string]any{"name": "paygo_tpm", "cost": "tokens"}}},
		},
		Measures: map[string]any{"tokens": map[string]any{"reserve_from": map[string]any{"json": "max_tokens"}, "max": 500,
			"settle_from": map[string]any{"json": "usage.total_tokens"}}}})
	gws := startGateways(t, 2, cfg)

	admitted, denied := burst(30, func(i int) (int, string) { return chat(t, gws[i%2], "key-burst", 100, 100) })
	if n := denied["429 ptu_tpm"] + denied["429 paygo_tpm"]; admitted != 16 || n != 14 || n != 30-admitted {
		t.Errorf("%d admitted, denied %v; want 16 admitted and 14 denied by ptu_tpm or paygo_tpm", admitted, denied)
	}
	if p, g := served[0].Load(), served[1].Load(); p != 10 || g != 6 {
		t.Errorf("ptu served %d, paygo %d; want 10 and 6", p, g)
	}
	waitRemaining(t, gws[1], "key-burst", "ptu_tpm", 0, "burst")
	waitRemaining(t, gws[1], "key-burst", "paygo_tpm", 0, "burst")
	waitRemaining(t, gws[0], "key-burst", "rpm", 100-16, "burst")
	for _, q := range readQuota(t, gws[0].URL, "key-burst") {
		if want := map[string]string{"rpm": "ptu", "ptu_tpm": "ptu", "paygo_tpm": "paygo"}[q.Name]; q.Upstream != want {
			t.Errorf("/_quota: %s has upstream %q, want %q", q.Name, q.Upstream, want)
		}
	}

	// Two requests use 900 of ptu's 1000; the third reserves 500, which
	// only paygo holds, and uses 50 there.
	for i, c := range []struct{ maxTokens, used int }{{500, 450}, {500, 450}, {500, 50}} {
		if status, policy := chat(t, gws[i%2], "key-settle", c.maxTokens, c.used); status != http.StatusOK {
			t.Fatalf("request %d: status %d %s", i, status, policy)
		}
	}
	if p, g := served[0].Load(), served[1].Load(); p != 12 || g != 7 {
		t.Errorf("ptu served %d, paygo %d; want 12 and 7", p, g)
	}
	waitRemaining(t, gws[0], "key-settle", "ptu_tpm", 1000-900, "settled")
	waitRemaining(t, gws[0], "key-settle", "paygo_tpm", 600-50, "settled")
	waitRemaining(t, gws[1], "key-settle", "rpm", 100-3, "settled")
}
