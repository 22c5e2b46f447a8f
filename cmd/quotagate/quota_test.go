package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// quotaBinaryConfig gives anonymous callers 4 requests per Berlin day (a
// calendar window, so nothing refills during the test) on a route to an
// upstream of the test's own.
const quotaBinaryConfig = `
server: {listen: 127.0.0.1:0, admin_listen: 127.0.0.1:0}
identity: {anonymous: {tier: anon}}
tiers: {anon: {}}
policies:
  daily:
    algorithm: fixed_window
    limits: {"*": {rate: 4, calendar: {unit: day, time_zone: Europe/Berlin}}}
upstreams: {up: {url: UPSTREAM}}
routes:
  - {name: any, method: GET, path: "/{rest...}", upstream: up, policies: [daily]}
`

// TestBinaryQuotaEndpoint: against the built binary, /_quota reports the
// caller's calendar quota without spending it or reaching the upstream, and
// the limit then admits exactly the remaining it reported.
func TestBinaryQuotaEndpoint(t *testing.T) {
	hits := make(chan string, 64)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits <- r.URL.Path
	}))
	t.Cleanup(up.Close)
	proc := startBinary(t, strings.ReplaceAll(quotaBinaryConfig, "UPSTREAM", up.URL))

	read := func() map[string]any {
		t.Helper()
		resp, err := http.Get(proc.URL() + "/_quota")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var rep struct {
			Tier     string           `json:"tier"`
			Policies []map[string]any `json:"policies"`
		}
		if resp.StatusCode != 200 || json.Unmarshal(b, &rep) != nil || rep.Tier != "anon" || len(rep.Policies) != 1 {
			t.Fatalf("GET /_quota: %d %s", resp.StatusCode, b)
		}
		return rep.Policies[0]
	}
	for i := 0; i < 3; i++ {
		if p := read(); p["remaining"] != float64(4) || p["limit"] != float64(4) || p["algorithm"] != "fixed_window" {
			t.Fatalf("read %d: %v", i, p)
		}
	}
	get := func() int {
		resp, err := http.Get(proc.URL() + "/work")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := get(); c != 200 {
		t.Fatalf("first request: %d", c)
	}
	p := read()
	left := int(p["remaining"].(float64))
	if left != 3 || p["window_s"].(float64) < 1 || p["window_s"].(float64) > 25*3600 {
		t.Fatalf("after one request: %v", p)
	}
	for i := 0; i < left; i++ {
		if c := get(); c != 200 {
			t.Fatalf("request %d of %d reported left: %d", i, left, c)
		}
	}
	if c := get(); c != 429 {
		t.Fatalf("past the reported remaining: %d, want 429", c)
	}
	close(hits)
	for path := range hits {
		if path != "/work" {
			t.Errorf("upstream saw %q", path)
		}
	}
}
