package gateway

import (
	"strings"
	"testing"

	"github.com/quotagate/quotagate/config"
)

// TestExplainRejectsMalformedRequests: a method or path that no client
// could send is an error naming what is wrong, never a panic.
func TestExplainRejectsMalformedRequests(t *testing.T) {
	cfg, err := config.Load("../config.yaml", func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ method, path, want string }{
		{"GE T", "/x", "method"},
		{"", "/x", "method: empty"},
		{"GET\r\n", "/x", "method"},
		{"GÉT", "/x", "method"},
		{"GET", "", "must start with /"},
		{"GET", "x", "must start with /"},
		{"GET", "http://h/v1/transfers/1", "must start with /"},
		{"GET", "/a b", "whitespace"},
		{"GET", "/a\tb", "whitespace"},
		{"GET", "/\x01", "control character"},
		{"GET", "/%zz", "escape"},
		{"GET", "/v1/transfers/1\x7f", "control character"},
	} {
		ex, err := Explain(cfg, tc.method, tc.path, "", nil)
		if err == nil {
			t.Errorf("Explain(%q, %q) = %+v, want an error", tc.method, tc.path, ex)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Explain(%q, %q): %v, want it to mention %q", tc.method, tc.path, err, tc.want)
		}
	}
	// Neighbours that are well-formed still explain.
	for _, tc := range []struct{ method, path, route string }{
		{"GET", "/v1/transfers/42?x=1", "transfers.get"},
		{"GET", "/v1/%74ransfers/42", "transfers.get"},
		{"GET", "/anything/else", "other.get"},
	} {
		ex, err := Explain(cfg, tc.method, tc.path, "", nil)
		if err != nil {
			t.Errorf("Explain(%q, %q): %v", tc.method, tc.path, err)
			continue
		}
		if ex.Route != tc.route {
			t.Errorf("Explain(%q, %q) route %q, want %q", tc.method, tc.path, ex.Route, tc.route)
		}
	}
}

// TestExplainCostBlock: a route whose cost is a block explains its
// reservation (the reserve as cost, the max a request may state) and what
// is settled from where.
func TestExplainCostBlock(t *testing.T) {
	cfg, err := config.Parse([]byte(`
identity: {anonymous: {tier: anon}}
tiers: {anon: {}}
policies:
  tokens: {limits: {"*": {rate: 1000, per: 1m, burst: 4000}}}
  requests: {limits: {"*": {rate: 10, per: 1s, burst: 4000}}}
upstreams: {llm: {url: "http://127.0.0.1:9"}}
routes:
  - name: chat
    method: POST
    path: /v1/chat
    upstream: llm
    policies: [tokens, requests]
    cost:
      reserve: 100
      reserve_from: {json: max_tokens}
      max: 4000
      settle_from: {sse: usage.total_tokens, header: X-Usage}
      settle_policies: [tokens]
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	ex, err := Explain(cfg, "POST", "/v1/chat", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := SettleExplained{Max: 4000, ReserveFrom: "json max_tokens", SettleFrom: "header X-Usage, sse usage.total_tokens", Policies: []string{"tokens"}}
	if ex.Cost != 100 || ex.Settle == nil || ex.Settle.Max != want.Max || ex.Settle.ReserveFrom != want.ReserveFrom ||
		ex.Settle.SettleFrom != want.SettleFrom || strings.Join(ex.Settle.Policies, ",") != "tokens" {
		t.Fatalf("explained cost %d, settle %+v; want 100 and %+v", ex.Cost, ex.Settle, want)
	}
}
