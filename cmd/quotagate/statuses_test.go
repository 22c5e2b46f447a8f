package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// TestBinaryAnswersTheStatusTable starts the binary with a config of its
// own — API keys, a tenant policy of burst 5, a cost-5 route, a tier with a
// tiny local limit, a dead upstream — and checks every row of the status
// table over real HTTP.
func TestBinaryAnswersTheStatusTable(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" || r.Header.Get("X-API-Key") != "" {
			w.WriteHeader(http.StatusTeapot) // the credential must never reach the upstream
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer up.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	hash := func(k string) string { s := sha256.Sum256([]byte(k)); return hex.EncodeToString(s[:]) }
	cfg := fmt.Sprintf(`server: {listen: %q, admin_listen: %q}
identity:
  api_keys:
    - {key_sha256: %s, tenant: acme, tier: gold}
    - {key_sha256: %s, tenant: tiny, tier: tiny}
tiers:
  gold: {}
  tiny: {local: {rate: 1, per: 1h, burst: 5}}
policies:
  tenant: {limits: {gold: {rate: 1, per: 1h, burst: 5}}}
  strict: {on_store_error: closed, limits: {"*": {rate: 100, per: 1s, burst: 100}}}
upstreams:
  up: {url: %q, timeout: 2s}
  dead: {url: %q, timeout: 2s}
routes:
  - {name: items.create, method: POST, path: "/items/{id}", upstream: up, cost: 5, policies: [tenant]}
  - {name: items.get, method: GET, path: "/items/{id}", upstream: up, policies: [strict]}
  - {name: dead.get, method: GET, path: /dead, upstream: dead}
`, "127.0.0.1:0", "127.0.0.1:0", hash("gold-key"), hash("tiny-key"), up.URL, deadURL)
	proc := startBinary(t, cfg)

	send := func(method, p, key string) (*http.Response, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, proc.URL()+p, nil)
		if key != "" {
			req.Header.Set("X-API-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var m map[string]any
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatalf("problem body: %v: %s", err, b)
			}
			for _, k := range []string{"type", "title", "status", "error", "message", "request_id"} {
				if _, ok := m[k]; !ok {
					t.Errorf("%s %s: problem lacks %q: %s", method, p, k, b)
				}
			}
		}
		return resp, m
	}
	expect := func(method, p, key string, status int, code string) (*http.Response, map[string]any) {
		t.Helper()
		resp, m := send(method, p, key)
		if resp.StatusCode != status || (code != "" && m["error"] != code) {
			t.Fatalf("%s %s: %d %v, want %d %s", method, p, resp.StatusCode, m, status, code)
		}
		return resp, m
	}

	resp, _ := expect("POST", "/items/1", "gold-key", 200, "")
	if resp.Header.Get("RateLimit-Policy") != `"tenant";q=5;w=18000` || resp.Header.Get("RateLimit") != `"tenant";r=0;t=18000` {
		t.Errorf("allowed headers: %q %q", resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit"))
	}
	resp, m := expect("POST", "/items/2", "gold-key", 429, "rate_limited")
	ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	// 5 units at 1 per hour, less the real time since the first request.
	retry, _ := m["retry_after_ms"].(float64)
	if m["policy"] != "tenant" || retry > 5*3600*1000 || retry < 5*3600*1000-60_000 || float64(ra)*1000 < retry {
		t.Errorf("policy 429: %v Retry-After %d", m, ra)
	}
	expect("POST", "/items/1", "tiny-key", 200, "") // takes the whole local burst of 5
	_, m = expect("GET", "/items/1", "tiny-key", 429, "rate_limited")
	if m["policy"] != "local" {
		t.Errorf("stage-1 denial names %v", m["policy"])
	}
	expect("GET", "/items/1", "wrong-key", 401, "unauthenticated")
	expect("GET", "/items/1", "", 401, "unauthenticated") // no anonymous block: a missing credential is 401
	expect("GET", "/nowhere", "gold-key", 404, "no_route")
	expect("GET", "/dead", "gold-key", 502, "upstream_unavailable")

	if err := proc.Stop(); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}
