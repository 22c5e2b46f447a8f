package gateway

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
)

// measuresConfig binds four policies to one route, each with its own
// cost: rpm a request (its name alone), flat 5 units, tpm the measure
// tokens (max_tokens, up to 500, settled from the response's
// total_tokens) and prompt the measure prompt (50, settled from
// prompt_tokens, which only the JSON answer reports). Each key KEYn is
// its own tenant tn, and every limit refills too slowly to matter.
const measuresConfig = `
server: {listen: 127.0.0.1:0, admin_listen: 127.0.0.1:0}` + settleHead + `
  rpm:    {limits: {"*": {rate: 3, per: 100000s, burst: 3}}}
  tpm:    {limits: {"*": {rate: 1000, per: 100000s, burst: 1000}}}
  flat:   {limits: {"*": {rate: 100, per: 100000s, burst: 100}}}
  prompt: {algorithm: fixed_window, limits: {"*": {rate: 500, per: 100000s}}}
upstreams:
  llm:  {url: UPSTREAM}
  dead: {url: DEAD}
routes:
  - name: chat
    method: POST
    path: /v1/chat/{mode}
    upstream: llm
    policies: [rpm, {name: tpm, cost: tokens}, {name: flat, cost: 5}, {name: prompt, cost: prompt}]
    measures:
      tokens:
        reserve_from: {json: max_tokens}
        max: 500
        settle_from: {header: X-Usage, json: usage.total_tokens, sse: usage.total_tokens}
      prompt: {reserve: 50, settle_from: {json: usage.prompt_tokens, sse: usage.prompt_tokens}}
`

// TestPolicyCostsOnEveryStore: on one route, each policy takes its own
// cost in one all-or-nothing decision (a request, a fixed 5, the tokens
// the body asks for, a prompt measure), each measure is settled exactly
// from the one response, on the memory store, on Redis and on a Redis
// Cluster; a request denied by one policy takes nothing from the others.
func TestPolicyCostsOnEveryStore(t *testing.T) {
	stores := []struct {
		name  string
		start func(t *testing.T) []string
	}{
		{"memory", func(*testing.T) []string { return nil }},
		{"redis", func(t *testing.T) []string { return []string{redistest.StartStandalone(t).Addr} }},
		{"cluster", func(t *testing.T) []string { return redistest.StartCluster(t, 3).Addrs() }},
	}
	for _, store := range stores {
		t.Run(store.name, func(t *testing.T) {
			sf := newSettleFixtureWith(t, nil, store.start(t), measuresConfig, time.Second)
			testPolicyCosts(t, sf)
		})
	}
}

func testPolicyCosts(t *testing.T, sf *settleFixture) {
	// Settled per measure from one response: tokens from total_tokens (or
	// the header), prompt from prompt_tokens where the answer has it;
	// where it has not, prompt keeps its reservation of 50.
	for i, c := range []struct {
		mode   string
		prompt int64
	}{{"json", 500 - 1}, {"sse", 500 - 50}, {"header", 500 - 50}} {
		n := i + 1
		resp, body := sf.post(t, n, "/v1/chat/"+c.mode+"?u=120", `{"model":"m","max_tokens":300}`, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d: %s", c.mode, resp.StatusCode, body)
		}
		want := map[string]int64{"rpm": 2, "flat": 95, "tpm": 1000 - 120, "prompt": c.prompt}
		if got := sf.remaining(t, n); !sameUnits(got, want) {
			t.Errorf("%s: after using 120 of 300 tokens: remaining %v, want %v", c.mode, got, want)
		}
	}

	// RPM binds: the fourth request is denied by rpm alone, and takes
	// nothing from tpm, flat or prompt.
	for range 3 {
		if resp, body := sf.post(t, 4, "/v1/chat/header?u=100", `{"max_tokens":300}`, nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	}
	resp, body := sf.post(t, 4, "/v1/chat/header?u=100", `{"max_tokens":300}`, nil)
	if resp.StatusCode != http.StatusTooManyRequests || deniedBy(t, body) != "rpm" {
		t.Fatalf("fourth request: status %d %s, want 429 by rpm", resp.StatusCode, body)
	}
	if got, want := sf.remaining(t, 4), map[string]int64{"rpm": 0, "flat": 85, "tpm": 700, "prompt": 350}; !sameUnits(got, want) {
		t.Errorf("after 3 requests and a denial: remaining %v, want %v", got, want)
	}

	// TPM binds: two requests use all 1000 tokens; a third asking one
	// token is denied by tpm, and rpm keeps its last request.
	for range 2 {
		if resp, body := sf.post(t, 5, "/v1/chat/json?u=500", `{"max_tokens":500}`, nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	}
	resp, body = sf.post(t, 5, "/v1/chat/json?u=1", `{"max_tokens":1}`, nil)
	if resp.StatusCode != http.StatusTooManyRequests || deniedBy(t, body) != "tpm" {
		t.Fatalf("third request: status %d %s, want 429 by tpm", resp.StatusCode, body)
	}
	if got, want := sf.remaining(t, 5), map[string]int64{"rpm": 1, "flat": 90, "tpm": 0, "prompt": 498}; !sameUnits(got, want) {
		t.Errorf("after 1000 tokens and a denial: remaining %v, want %v", got, want)
	}
}

// sameUnits reports whether got holds exactly want's policies and units.
func sameUnits(got, want map[string]int64) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			return false
		}
	}
	return true
}

// deniedBy returns the policy a 429 problem body names.
func deniedBy(t *testing.T, body string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("429 body %q: %v", body, err)
	}
	s, _ := m["policy"].(string)
	return s
}
