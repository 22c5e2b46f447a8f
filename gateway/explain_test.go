package gateway

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

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
		ex, err := Explain(cfg, ExplainRequest{Method: tc.method, Path: tc.path}, nil)
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
		ex, err := Explain(cfg, ExplainRequest{Method: tc.method, Path: tc.path}, nil)
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
	ex, err := Explain(cfg, ExplainRequest{Method: "POST", Path: "/v1/chat"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := SettleExplained{Max: 4000, ReserveFrom: "json max_tokens", SettleFrom: "header X-Usage, sse usage.total_tokens", Policies: []string{"tokens"}}
	if ex.Cost != 100 || ex.Settle == nil || ex.Settle.Max != want.Max || ex.Settle.ReserveFrom != want.ReserveFrom ||
		ex.Settle.SettleFrom != want.SettleFrom || strings.Join(ex.Settle.Policies, ",") != "tokens" {
		t.Fatalf("explained cost %d, settle %+v; want 100 and %+v", ex.Cost, ex.Settle, want)
	}
}

// explainHead starts the configurations of the explain tests: anonymous
// callers of one tier, policies to follow.
const explainHead = `
server: {listen: 127.0.0.1:0, admin_listen: 127.0.0.1:0}
identity: {anonymous: {tier: anon}}
tiers: {anon: {}}
policies:`

// TestExplainReservesAsTheGateway: for each request (method, headers,
// body), Explain's Reserve is what the gateway takes for the same request,
// read from the RateLimit remaining of the policy that takes it; a request
// the gateway refuses is a refusal in Explain too.
func TestExplainReservesAsTheGateway(t *testing.T) {
	const base = explainHead + `
  tokens: {limits: {"*": {rate: 1, per: 1h, burst: 1000000}}}
upstreams: {llm: {url: UPSTREAM, timeout: 5s}}
routes:
  - name: chat
    method: POST
    path: /v1/chat
    upstream: llm
    policies: [tokens]
    cost:
      reserve: 100
      reserve_from: {json: max_tokens, json_count: n, header: X-Max-Tokens}
      max: 32000
  - {name: fixed, method: POST, path: /v1/fixed, upstream: llm, cost: 7, policies: [tokens]}
`
	f := newFixture(t, base)
	cfg, err := config.Load(f.path, testGetenv)
	if err != nil {
		t.Fatal(err)
	}
	json := map[string]string{"Content-Type": "application/json"}
	cases := []struct {
		name, path string
		hdr        map[string]string
		body       string
		refused    bool
	}{
		{"no body", "/v1/chat", nil, "", false},
		{"no body, header", "/v1/chat", map[string]string{"X-Max-Tokens": "55"}, "", false},
		{"stated", "/v1/chat", json, `{"max_tokens":700}`, false},
		{"stated times n", "/v1/chat", json, `{"max_tokens":700,"n":3}`, false},
		{"without the field", "/v1/chat", json, `{"messages":[]}`, false},
		{"a form", "/v1/chat", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, `{"max_tokens":1}`, false},
		{"untyped", "/v1/chat", nil, `{"max_tokens":9}`, false},
		{"above max", "/v1/chat", json, `{"max_tokens":40000}`, true},
		{"fixed cost", "/v1/fixed", nil, `{}`, false},
	}
	left := int64(1000000)
	for _, c := range cases {
		h := http.Header{}
		for k, v := range c.hdr {
			h.Set(k, v)
		}
		var body []byte
		var rd io.Reader
		if c.body != "" {
			body, rd = []byte(c.body), strings.NewReader(c.body)
		}
		ex, err := Explain(cfg, ExplainRequest{Method: "POST", Path: c.path, Header: h, Body: body}, testGetenv)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		w := f.do("POST", c.path, c.hdr, rd)
		if c.refused {
			if w.Code != http.StatusBadRequest || !strings.HasPrefix(ex.Refusal, "400 bad_request") {
				t.Errorf("%s: gateway %d, explain refusal %q; want both to refuse 400", c.name, w.Code, ex.Refusal)
			}
			continue
		}
		if w.Code != http.StatusOK || ex.Refusal != "" {
			t.Fatalf("%s: gateway %d %s, explain refusal %q", c.name, w.Code, w.Body.String(), ex.Refusal)
		}
		took := left - rateLimitRemaining(t, w.Header())
		left -= took
		if took != ex.Reserve {
			t.Errorf("%s: the gateway reserved %d, explain says %d (%s)", c.name, took, ex.Reserve, ex.ReserveWhy)
		}
	}
}

// TestExplainSettlesNoConcurrencyPolicy: a route's concurrency policy
// holds a slot, never units, so explain does not list it among the
// settled policies, as the settlement itself does not take it.
func TestExplainSettlesNoConcurrencyPolicy(t *testing.T) {
	cfg, err := config.Parse([]byte(`
identity: {anonymous: {tier: anon}}
tiers: {anon: {}}
policies:
  tokens: {limits: {"*": {rate: 1000, per: 1m, burst: 4000}}}
  slots: {algorithm: concurrency, limits: {"*": {max: 4}}}
upstreams: {llm: {url: "http://127.0.0.1:9"}}
routes:
  - name: chat
    method: POST
    path: /v1/chat
    upstream: llm
    policies: [tokens, slots]
    cost: {reserve: 100, reserve_from: {json: max_tokens}, max: 4000, settle_from: {json: usage.total_tokens}}
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	ex, err := Explain(cfg, ExplainRequest{Method: "POST", Path: "/v1/chat"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ex.Settle == nil || strings.Join(ex.Settle.Policies, ",") != "tokens" {
		t.Fatalf("settled policies %+v, want [tokens]", ex.Settle)
	}
	if ex.Reserve != 4000 || ex.ReserveWhy != "max" {
		t.Errorf("a body-less POST reserves %d (%s), want max 4000", ex.Reserve, ex.ReserveWhy)
	}
}

// TestExplainPolicyCostsAsTheGateway: Explain's cost per policy is what
// the gateway takes from each policy of a route whose policies take a
// request, a fixed number and a measure, read from the quota endpoint;
// and it lists the measure with the reservation of the request.
func TestExplainPolicyCostsAsTheGateway(t *testing.T) {
	const base = explainHead + `
  rpm:  {limits: {"*": {rate: 1, per: 1h, burst: 1000}}}
  tpm:  {limits: {"*": {rate: 1, per: 1h, burst: 1000000}}}
  flat: {limits: {"*": {rate: 1, per: 1h, burst: 1000}}}
upstreams: {llm: {url: UPSTREAM, timeout: 5s}}
routes:
  - {name: chat, method: POST, path: /v1/chat, upstream: llm,
     policies: [rpm, {name: tpm, cost: tokens}, {name: flat, cost: 5}],
     measures: {tokens: {reserve: 100, reserve_from: {json: max_tokens, json_count: n}, max: 32000, settle_from: {header: X-Never}}}}
`
	f := newFixture(t, base)
	cfg, err := config.Load(f.path, testGetenv)
	if err != nil {
		t.Fatal(err)
	}
	hdr := map[string]string{"Content-Type": "application/json"}
	left := map[string]int64{"rpm": 1000, "tpm": 1000000, "flat": 1000}
	for _, body := range []string{`{"max_tokens":700}`, `{"max_tokens":700,"n":3}`, `{"messages":[]}`, ""} {
		var rd io.Reader
		var b []byte
		if body != "" {
			rd, b = strings.NewReader(body), []byte(body)
		}
		h := http.Header{}
		h.Set("Content-Type", "application/json")
		ex, err := Explain(cfg, ExplainRequest{Method: "POST", Path: "/v1/chat", Header: h, Body: b}, testGetenv)
		if err != nil {
			t.Fatal(err)
		}
		if w := f.do("POST", "/v1/chat", hdr, rd); w.Code != http.StatusOK {
			t.Fatalf("%q: status %d %s", body, w.Code, w.Body.String())
		}
		_, byName := f.quota(t, nil)
		if len(ex.Policies) != 3 || len(ex.Measures) != 1 || ex.Measures[0].Name != "tokens" {
			t.Fatalf("%q: explained %+v", body, ex)
		}
		for _, p := range ex.Policies {
			now := byName[p.Name+"/"].Remaining
			if took := left[p.Name] - now; took != p.Cost {
				t.Errorf("%q: the gateway took %d from %s, explain says %d", body, took, p.Name, p.Cost)
			}
			left[p.Name] = now
			if want := p.Name == "tpm"; (p.Measure == "tokens") != want || p.Settled != want {
				t.Errorf("%q: policy %s explained as measure %q settled %t", body, p.Name, p.Measure, p.Settled)
			}
		}
		if tpm := ex.Policies[1]; ex.Measures[0].Reserve != tpm.Cost {
			t.Errorf("%q: measure tokens reserves %d, policy tpm costs %d", body, ex.Measures[0].Reserve, tpm.Cost)
		}
	}
}

// TestExplainUpstreamsAsTheGateway: for a route that lists upstreams,
// Explain lists each in order with its policies, the cost of each and
// what the request reserves there; sending the request, the upstream
// that admits it took exactly those costs and every other policy nothing
// (the reservation stands: the response reports no usage). With
// concurrency policies, each upstream holds a slot of each of its own.
func TestExplainUpstreamsAsTheGateway(t *testing.T) {
	sf := newSettleFixtureWith(t, nil, nil, fallbackConfig, time.Second)
	cfg, err := config.Load(sf.path, testGetenv)
	if err != nil {
		t.Fatal(err)
	}
	const body = `{"max_tokens":400}`
	ex, err := Explain(cfg, ExplainRequest{Method: "POST", Path: "/v1/chat/missing", Credential: "KEY1",
		Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(body)}, testGetenv)
	if err != nil {
		t.Fatal(err)
	}
	costs := func(c CandidateExplained) map[string]int64 {
		out := map[string]int64{}
		for _, p := range c.Policies {
			out[p.Name] = p.Cost
		}
		return out
	}
	if len(ex.Upstreams) != 2 || len(ex.Policies) != 0 ||
		ex.Upstreams[0].Upstream != "ptu" || !sameUnits(costs(ex.Upstreams[0]), map[string]int64{"rpm": 1, "ptu_tpm": 400}) ||
		ex.Upstreams[1].Upstream != "paygo" || !sameUnits(costs(ex.Upstreams[1]), map[string]int64{"rpm": 1, "paygo_tpm": 400}) {
		t.Fatalf("explained %+v, want ptu (rpm 1, ptu_tpm 400) then paygo (rpm 1, paygo_tpm 400), no route policies", ex)
	}
	for _, c := range ex.Upstreams {
		if !sameUnits(c.Reserve, map[string]int64{"tokens": 400}) || c.Slots != 0 {
			t.Errorf("%s: reserve %v slots %d, want tokens 400 and no slot", c.Upstream, c.Reserve, c.Slots)
		}
	}
	// ptu admits two (1000 tokens, 400 each), then paygo the third.
	for i, want := range []string{"ptu", "ptu", "paygo"} {
		before := sf.remaining(t, 1)
		resp, b := sf.post(t, 1, "/v1/chat/missing", body, nil)
		if got := resp.Header.Get("Quotagate-Upstream"); resp.StatusCode != http.StatusOK || got != want {
			t.Fatalf("request %d: status %d upstream %q %s, want 200 from %s", i, resp.StatusCode, got, b, want)
		}
		explained := costs(ex.Upstreams[slices.IndexFunc(ex.Upstreams, func(c CandidateExplained) bool { return c.Upstream == want })])
		after := sf.remaining(t, 1)
		for name, left := range before {
			if took := left - after[name]; took != explained[name] {
				t.Errorf("request %d on %s: the gateway took %d from %s, explain says %d", i, want, took, name, explained[name])
			}
		}
	}

	sf = newSettleFixtureWith(t, nil, nil, slotFallbackConfig, time.Second)
	if cfg, err = config.Load(sf.path, testGetenv); err != nil {
		t.Fatal(err)
	}
	ex, err = Explain(cfg, ExplainRequest{Method: "POST", Path: "/v1/chat/missing", Credential: "KEY1",
		Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(body)}, testGetenv)
	if err != nil {
		t.Fatal(err)
	}
	if len(ex.Upstreams) != 2 ||
		!sameUnits(costs(ex.Upstreams[0]), map[string]int64{"rpm": 1, "ptu_slots": 1, "probe": 1, "ptu_tpm": 400, "watch": 400}) || ex.Upstreams[0].Slots != 2 ||
		!sameUnits(costs(ex.Upstreams[1]), map[string]int64{"rpm": 1, "paygo_slots": 1, "paygo_tpm": 400}) || ex.Upstreams[1].Slots != 1 {
		t.Errorf("with slots: explained %+v, want 400 tokens on each upstream, two slots on ptu (probe's too) and one on paygo", ex.Upstreams)
	}
}
