package config

import (
	"slices"
	"testing"
)

// TestCostBlock: a cost written as a block decodes with its defaults (max
// = reserve, max_body 1 MiB, every policy settled), lowercases
// settle_policies, and leaves Cost as the reserve; a number stays a fixed
// cost without a block.
func TestCostBlock(t *testing.T) {
	c := mustParse(t, `
identity: {anonymous: {tier: free}}
tiers: {free: {}}
upstreams: {llm: {url: "http://127.0.0.1:9001"}}
policies:
  llm-tokens: {limits: {free: {rate: 100000, per: 1m, burst: 40000}}}
  tenant: {limits: {free: {rate: 10, per: 1s, burst: 40000}}}
routes:
  - name: chat.create
    method: POST
    path: /v1/chat/completions
    upstream: llm
    policies: [llm-tokens, tenant]
    cost:
      reserve: 1000
      reserve_from: {json: max_tokens, header: X-Max-Tokens}
      max: 32000
      settle_from: {header: X-Usage-Total-Tokens, json: usage.total_tokens, sse: usage.total_tokens}
      settle_policies: [LLM-Tokens]
  - {name: plain, method: GET, path: /p, upstream: llm, policies: [tenant], cost: {reserve: 5}}
  - {name: fixed, method: GET, path: /f, upstream: llm, policies: [tenant], cost: 7}
`, noEnv)
	r := c.Routes[0]
	b := r.Settle
	if r.Cost != 1000 || b == nil || b.Reserve != 1000 || b.Max != 32000 || b.MaxBody != 1<<20 {
		t.Fatalf("chat.create: cost %d, block %+v", r.Cost, b)
	}
	if rf := b.ReserveFrom; rf.JSON != "max_tokens" || rf.Header != "X-Max-Tokens" || rf.JSONAliases != nil ||
		*b.SettleFrom != (SettleFrom{Header: "X-Usage-Total-Tokens", JSON: "usage.total_tokens", SSE: "usage.total_tokens"}) {
		t.Errorf("sources: %+v %+v", b.ReserveFrom, b.SettleFrom)
	}
	if !slices.Equal(b.SettlePolicies, []string{"llm-tokens"}) {
		t.Errorf("settle_policies = %v, want [llm-tokens]", b.SettlePolicies)
	}
	if p := c.Routes[1]; p.Cost != 5 || p.Settle == nil || p.Settle.Max != 5 || p.Settle.SettleFrom != nil || p.Settle.ReserveFrom != nil {
		t.Errorf("plain: cost %d, block %+v; want 5 with max 5 and no sources", p.Cost, p.Settle)
	}
	if f := c.Routes[2]; f.Cost != 7 || f.Settle != nil {
		t.Errorf("fixed: cost %d, block %+v; want 7 and no block", f.Cost, f.Settle)
	}
	red := c.Redacted()["routes"].([]any)[0].(map[string]any)["cost"].(map[string]any)
	if red["reserve"] != int64(1000) || red["max"] != int64(32000) {
		t.Errorf("redacted cost = %v", red)
	}
}

// TestPolicyCosts: a route's policies are names (the route's cost) or
// {name, cost} with a number or a measure; measures take their defaults
// (reserve = max with reserve_from, max = reserve without); a cost block
// is the measure "cost" of every policy listed by name, settled only for
// its settle_policies; and Validate leaves it all as it was when called
// again (measures no policy takes: testdata/invalid/measures.yaml).
func TestPolicyCosts(t *testing.T) {
	c := mustParse(t, `
identity: {anonymous: {tier: free}}
tiers: {free: {}}
upstreams: {llm: {url: "http://127.0.0.1:9001"}}
policies:
  rpm: {limits: {free: {rate: 60, per: 1m, burst: 60}}}
  tpm: {limits: {free: {rate: 40000, per: 1m, burst: 40000}}}
  flat: {limits: {free: {rate: 100, per: 1m, burst: 100}}}
  slots: {algorithm: concurrency, limits: {free: {max: 4}}}
routes:
  - name: chat
    method: POST
    path: /v1/chat/completions
    upstream: llm
    cost: 2
    policies: [RPM, {name: TPM, cost: Tokens}, {name: flat, cost: 5}, slots]
    measures:
      tokens: {reserve_from: {json: max_tokens}, max: 32000, settle_from: {json: usage.total_tokens}}
  - name: legacy
    method: POST
    path: /v1/legacy
    upstream: llm
    policies: [rpm, tpm]
    cost: {reserve: 10, max: 50, reserve_from: {header: X-Max}, settle_from: {header: X-Usage}, settle_policies: [tpm]}
`, noEnv)
	for range 2 {
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	want := []PolicyRef{{Name: "rpm"}, {Name: "tpm", Cost: "Tokens", Measure: "tokens"}, {Name: "flat", Cost: "5", Units: 5}, {Name: "slots"}}
	if got := c.Routes[0].Policies; !slices.Equal(got, want) {
		t.Errorf("chat policies = %+v, want %+v", got, want)
	}
	if m := c.Routes[0].Measures["tokens"]; m.Reserve != 32000 || m.Max != 32000 || m.MaxBody != 1<<20 {
		t.Errorf("tokens = %+v, want reserve = max = 32000, max_body 1 MiB", m)
	}
	want = []PolicyRef{{Name: "rpm", Measure: "cost", Unsettled: true}, {Name: "tpm", Measure: "cost"}}
	if got := c.Routes[1].Policies; !slices.Equal(got, want) {
		t.Errorf("legacy policies = %+v, want %+v", got, want)
	}
	if m := c.Routes[1].Measures; len(m) != 1 || m["cost"].Reserve != 10 || m["cost"].Max != 50 || m["cost"].SettleFrom.Header != "X-Usage" {
		t.Errorf("legacy measures = %+v, want the block as measure cost", m)
	}
}

// TestPrices: prices as a price list writes them become nano-USD per
// token exactly (cached defaults to input).
func TestPrices(t *testing.T) {
	for in, want := range map[string]int64{"2.50": 2500, "0.15": 150, "0.075": 75, "10": 10000, "0": 0, "1000000": 1_000_000_000} {
		if got, err := parsePrice(in); err != nil || got != want {
			t.Errorf("parsePrice(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	c := mustParse(t, `
identity: {anonymous: {tier: free}}
tiers: {free: {}}
prices: {gpt-4o: {input: "2.50", output: "10.00"}, "*": {input: "0.15", output: "0.60", cached: "0.075"}}
upstreams: {llm: {url: "http://127.0.0.1:9001"}}
routes: [{name: r, method: GET, path: /, upstream: llm}]
`, noEnv)
	if p := c.Prices["gpt-4o"]; p.InputNano != 2500 || p.OutputNano != 10000 || p.CachedNano != 2500 {
		t.Errorf("gpt-4o = %+v", p)
	}
	if p := c.Prices["*"]; p.InputNano != 150 || p.OutputNano != 600 || p.CachedNano != 75 {
		t.Errorf("* = %+v", p)
	}
}
