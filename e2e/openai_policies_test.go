package e2e

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// policiesConfig is the policy shape with figures a test can
// exhaust: per tenant, requests (std: 3), tokens per model (1000 of
// gpt-4o, 10000 of gpt-4o-mini) and money in a calendar month (std: $1,
// thrifty: 5200 µUSD), all three on one route and decided at once.
const policiesConfig = `
server: {listen: 127.0.0.1:0, admin_listen: 127.0.0.1:0}
store: {kind: memory}
identity:
  api_keys:
    - {key_sha256: KEY_A, tenant: team-a, tier: std}
    - {key_sha256: KEY_B, tenant: team-b, tier: thrifty}
tiers:
  std:     {local: {rate: 100, per: 1s, burst: 100}}
  thrifty: {local: {rate: 100, per: 1s, burst: 100}}
dimensions:
  model: {json: model, values: [gpt-4o, gpt-4o-mini]}
prices:
  gpt-4o:      {input: "2.50", output: "10.00"}
  gpt-4o-mini: {input: "0.15", output: "0.60"}
  "*":         {input: "2.50", output: "10.00"}
policies:
  rpm:
    limits:
      std:     {rate: 3, per: 1h, burst: 3}
      thrifty: {rate: 100, per: 1h, burst: 100}
  tpm:
    by: [model]
    limits: {"*": {rate: 1000, per: 1h, burst: 1000}}
    values:
      gpt-4o-mini: {"*": {rate: 10000, per: 1h, burst: 10000}}
  spend:
    algorithm: fixed_window
    on_store_error: closed
    limits:
      std:     {rate: 1000000, calendar: {unit: month, time_zone: UTC}}
      thrifty: {rate: 5200, calendar: {unit: month, time_zone: UTC}}
upstreams:
  llm: {url: "UPSTREAM", timeout: 30s}
routes:
  - name: chat.create
    method: POST
    path: /v1/chat/completions
    upstream: llm
    client_signals: openai
    policies: [rpm, {name: tpm, cost: tokens}, {name: spend, cost: usd}]
    measures:
      tokens:
        reserve_from: {json: max_tokens, prompt_bytes_per_token: 4}
        max: 1000
        settle: usage.prompt_tokens + usage.completion_tokens
      usd:
        reserve_from: {measure: tokens}
        max: 5200
        settle: (usage.prompt_tokens * price(model).input + usage.completion_tokens * price(model).output) / 1000
`

// sdkLine is one line of testdata/openai_steps.mjs's output.
type sdkLine struct {
	Step              string         `json:"step"`
	OK                bool           `json:"ok"`
	Status            int            `json:"status"`
	Code              string         `json:"code"`
	Type              string         `json:"type"`
	Message           string         `json:"message"`
	RetryAfterMS      string         `json:"retryAfterMs"`
	ShouldRetry       string         `json:"shouldRetry"`
	Usage             map[string]int `json:"usage"`
	RemainingRequests string         `json:"remainingRequests"`
	RemainingTokens   string         `json:"remainingTokens"`
}

// TestOpenAISDKPolicyLanguage drives the Node openai SDK through a route
// that binds requests, tokens per model and a monthly budget at once, on
// the memory store, Redis and a Cluster. Expectation (the upstream answers
// max_tokens in all, 10 of them prompt): team-a's second gpt-4o request
// (500 + its prompt bound against 500 left) is denied on tokens while
// gpt-4o-mini, its own bucket, is served; its fourth admitted request is
// denied on requests (3), the denial on tokens having taken none. team-b's
// budget of 5200 µUSD pays one gpt-4o answer (4925 µUSD), then refuses a
// gpt-4o-mini request whose price at its bounds (about 364) exceeds the
// 275 left, as OpenAI refuses a spent quota (insufficient_quota), with
// x-should-retry: false and retry-after-ms to the start of next month,
// and admits a smaller one (bound about 184) that settles to 176. Each
// denial's message says what the request asked of the policy that
// decided. /_quota then shows exactly what was spent: 99 left of team-b's,
// 1,000,000 − 5277 of team-a's.
func TestOpenAISDKPolicyLanguage(t *testing.T) {
	node, dir := openAISDK(t)
	hash := func(key string) string { s := sha256.Sum256([]byte(key)); return hex.EncodeToString(s[:]) }
	type step struct {
		Step      string `json:"step"`
		Key       string `json:"key"`
		Model     string `json:"model"`
		MaxTokens int    `json:"max_tokens"`
		Stream    bool   `json:"stream"`
	}
	steps := []step{
		{"a-4o", "key-a", "gpt-4o", 500, false},
		{"a-4o-tokens", "key-a", "gpt-4o", 500, false},
		{"a-mini-stream", "key-a", "gpt-4o-mini", 500, true},
		{"a-mini", "key-a", "gpt-4o-mini", 100, false},
		{"a-mini-requests", "key-a", "gpt-4o-mini", 100, false},
		{"b-4o", "key-b", "gpt-4o", 500, false},
		{"b-mini-budget", "key-b", "gpt-4o-mini", 600, false},
		{"b-mini-small", "key-b", "gpt-4o-mini", 300, false},
	}
	stepsJSON, _ := json.Marshal(steps)

	for _, store := range []string{"memory", "redis", "cluster"} {
		t.Run(store, func(t *testing.T) {
			up := llmUpstream(t)
			cfg := strings.NewReplacer("KEY_A", hash("key-a"), "KEY_B", hash("key-b"), "UPSTREAM", up.URL).Replace(policiesConfig)
			p := startYAMLGateway(t, cfg, store)
			out := runNode(t, node, dir, "openai_steps.mjs", "QG_BASE="+p.URL(), "QG_STEPS="+string(stepsJSON))
			got := map[string]sdkLine{}
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				t.Logf("sdk %s", sc.Text())
				var l sdkLine
				if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
					t.Fatalf("%q: %v", sc.Text(), err)
				}
				got[l.Step] = l
			}
			served := func(name string, total int) {
				t.Helper()
				if l := got[name]; !l.OK || l.Usage["total_tokens"] != total {
					t.Errorf("%s: %+v, want served with %d tokens", name, l, total)
				}
			}
			denied := func(name, code, typ, what string) sdkLine {
				t.Helper()
				l := got[name]
				if l.OK || l.Status != http.StatusTooManyRequests || l.Code != code || l.Type != typ || !strings.Contains(l.Message, what) {
					t.Errorf("%s: %+v, want 429 %s of type %q saying %q", name, l, code, typ, what)
				}
				return l
			}
			served("a-4o", 500)
			// 500 left of 1000; asked 500 and the prompt's bound.
			tokens := denied("a-4o-tokens", "rate_limit_exceeded", "tokens", "policy tpm on tokens: limit 1000, remaining 500, requested 5")
			if n := requestedOf(tokens.Message); n <= 500 || n > 1000 {
				t.Errorf("a-4o-tokens: requested %d, want 500 + the prompt's bound", n)
			}
			served("a-mini-stream", 500)
			served("a-mini", 100)
			if l := got["a-mini"]; l.RemainingRequests != "0" {
				t.Errorf("a-mini: x-ratelimit-remaining-requests %q, want 0 (3 admitted; the denial on tokens took none)", l.RemainingRequests)
			}
			denied("a-mini-requests", "rate_limit_exceeded", "requests", "policy rpm on requests: limit 3, remaining 0, requested 1.")
			served("b-4o", 500)
			// 275 left; the price at its bounds: 600 completion tokens at
			// 0.60 and a prompt of ceil(bytes/4) at 0.15, per million.
			budget := denied("b-mini-budget", "insufficient_quota", "insufficient_quota", "policy spend on usd: limit 5200, remaining 275, requested 36")
			if budget.ShouldRetry != "false" {
				t.Errorf("b-mini-budget: x-should-retry %q, want false: the budget is back next month", budget.ShouldRetry)
			}
			now := time.Now().UTC()
			untilMonth := time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, time.UTC).Sub(now)
			if ms, err := strconv.ParseInt(budget.RetryAfterMS, 10, 64); err != nil || (time.Duration(ms)*time.Millisecond-untilMonth).Abs() > time.Minute {
				t.Errorf("b-mini-budget: retry-after-ms %q, want the %v to the start of next month", budget.RetryAfterMS, untilMonth)
			}
			served("b-mini-small", 300)

			for key, want := range map[string]int64{"key-b": 5200 - 4925 - 176, "key-a": 1000000 - 4925 - 296 - 56} {
				if got := quotaRemaining(t, p.URL(), key, "spend"); got != want {
					t.Errorf("%s: spend remaining %d µUSD, want %d: each answer settled to its exact price", key, got, want)
				}
			}
		})
	}
}

// requestedOf returns the number after "requested " in a denial's message,
// or -1.
func requestedOf(msg string) int64 {
	_, rest, ok := strings.Cut(msg, "requested ")
	if !ok {
		return -1
	}
	n, err := strconv.ParseInt(strings.TrimRight(strings.Fields(rest)[0], ".,"), 10, 64)
	if err != nil {
		return -1
	}
	return n
}
