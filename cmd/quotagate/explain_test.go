package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quotagate/quotagate/internal/doccheck"
)

// explainUpstreamsConfig is the LLM guide's fallback: ptu then paygo,
// each with its token policy, rpm on both, a concurrency policy on paygo.
const explainUpstreamsConfig = `
identity:
  api_keys:
    - {key_sha256: 25ad676f157ce81113842e66c3086a6f99eb3c94e3958371e953f81a55e63d41, tenant: acme, tier: pro}
tiers: {pro: {}}
policies:
  rpm:       {limits: {"*": {rate: 60, per: 1m, burst: 60}}}
  ptu_tpm:   {scope: global, limits: {"*": {rate: 200000, per: 1m, burst: 200000}}}
  paygo_tpm: {limits: {"*": {rate: 40000, per: 1m, burst: 40000}}}
  slots:     {algorithm: concurrency, limits: {"*": {max: 4}}}
upstreams:
  ptu:   {url: "http://127.0.0.1:9001"}
  paygo: {url: "http://127.0.0.1:9002"}
routes:
  - name: chat.create
    method: POST
    path: /v1/chat/completions
    upstreams:
      - {upstream: ptu,   policies: [rpm, {name: ptu_tpm, cost: tokens}]}
      - {upstream: paygo, policies: [rpm, {name: paygo_tpm, cost: tokens}, slots]}
    measures:
      tokens:
        reserve_from: {json: max_tokens, json_count: n, prompt_bytes_per_token: 4}
        max: 32000
        settle: usage.prompt_tokens + usage.completion_tokens
`

// writeFile writes text to name in a fresh directory and returns its path.
func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestExplainListsEachUpstream: explain of a route that lists upstreams
// prints each, in order, with what the request reserves there and the
// table of its policies with their costs, and no route-wide table.
func TestExplainListsEachUpstream(t *testing.T) {
	cfg := writeFile(t, "up.yaml", explainUpstreamsConfig)
	body := writeFile(t, "body.json", `{"max_tokens": 1000, "n": 2}`) // 28 bytes: a prompt of at most 7 tokens
	code, out, errs := runCmd(t, "explain", "-config", cfg, "-method", "POST", "-path", "/v1/chat/completions",
		"-key", "llm-demo-key", "-header", "Content-Type: application/json", "-body", body)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	// Each upstream's section, white space collapsed.
	ptu, paygo, ok := strings.Cut(strings.Join(strings.Fields(out), " "), " 2. paygo: ")
	if !ok {
		t.Fatalf("explain output lists no second upstream paygo:\n%s", out)
	}
	_, ptu, ok = strings.Cut(ptu, " upstreams: in order; a request one denies is decided against the next, nothing taken from it 1. ptu: ")
	if !ok {
		t.Fatalf("explain output lists no upstreams, ptu first:\n%s", out)
	}
	for _, c := range []struct{ section, want string }{
		{ptu, "reserves tokens 2007 NAME"},
		{ptu, " ptu_tpm 2007 tokens, settled global token_bucket 200000/1m0s burst 200000 "},
		{ptu, " rpm 1 tenant token_bucket 60/1m0s "},
		{paygo, "reserves tokens 2007; holds 1 slot NAME"},
		{paygo, " rpm 1 tenant token_bucket 60/1m0s "},
		{paygo, " paygo_tpm 2007 tokens, settled tenant token_bucket 40000/1m0s "},
		{paygo, " slots 1 tenant concurrency 4 in flight"},
	} {
		if !strings.Contains(c.section, c.want) {
			t.Errorf("explain output lacks %q in its upstream's section:\n%s", c.want, out)
		}
	}
	if strings.Contains(ptu, "paygo_tpm") || !strings.Contains(out, "measure: tokens 2007 (what the request states)") {
		t.Errorf("explain output: ptu lists paygo's policy, or the measure's reservation is not 2007 (2 × 1000 + 28 bytes / 4):\n%s", out)
	}
	if strings.Contains(out, "policies:") {
		t.Errorf("explain prints a route-wide policy table for a route that lists upstreams:\n%s", out)
	}
}

// TestExplainGuideMoneyBound: on the LLM guide's configuration as
// written, a gpt-4o request of max_tokens 1000 in a 400-byte body
// reserves the price of its bounds, as the guide computes it: 400 prompt
// and 1000 completion tokens, (400 × 2500 + 1000 × 10000) / 1000 = 11000
// micro-USD, and 1400 tokens.
func TestExplainGuideMoneyBound(t *testing.T) {
	block, err := doccheck.LLMGuideConfig("../..")
	if err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, "llm.yaml", block)
	head := `{"model": "gpt-4o", "max_tokens": 1000, "messages": [{"role": "user", "content": "`
	tail := `"}]}`
	body := writeFile(t, "body.json", head+strings.Repeat("x", 400-len(head)-len(tail))+tail)
	code, out, errs := runCmd(t, "explain", "-config", cfg, "-method", "POST", "-path", "/v1/chat/completions",
		"-key", "llm-free-key", "-header", "Content-Type: application/json", "-body", body)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	for _, w := range []string{
		"by:      model=gpt-4o",
		"measure: tokens 1400 (what the request states)",
		"measure: usd 11000 (its settle on the request's token bounds); reserved from the token bounds of tokens, at most 500000",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("explain output lacks %q:\n%s", w, out)
		}
	}
}
