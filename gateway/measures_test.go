package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/usage"
)

// chatRoute starts the configurations' one route, chat, to upstream llm
// (DEAD is an upstream that never answers), its policies to follow.
const chatRoute = `
upstreams:
  llm:  {url: UPSTREAM}
  dead: {url: DEAD}
routes:
  - name: chat
    method: POST
    path: /v1/chat/{mode}
    upstream: llm
`

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
` + chatRoute + `    policies: [rpm, {name: tpm, cost: tokens}, {name: flat, cost: 5}, {name: prompt, cost: prompt}]
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
	for _, store := range everyStore {
		t.Run(store.name, func(t *testing.T) {
			addrs, _ := store.start(t)
			sf := newSettleFixtureWith(t, nil, addrs, measuresConfig, time.Second)
			testPolicyCosts(t, sf)
		})
	}
}

// everyStore starts each store a settlement test runs on: the memory
// store (no addresses), a Redis server (also returned) and a Cluster.
var everyStore = []struct {
	name  string
	start func(t *testing.T) ([]string, *redistest.Server)
}{
	{"memory", func(*testing.T) ([]string, *redistest.Server) { return nil, nil }},
	{"redis", func(t *testing.T) ([]string, *redistest.Server) {
		srv := redistest.StartStandalone(t)
		return []string{srv.Addr}, srv
	}},
	{"cluster", func(t *testing.T) ([]string, *redistest.Server) { return redistest.StartCluster(t, 3).Addrs(), nil }},
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

// dimensionsConfig keys tpm by the body's model: gpt-4o and gpt-4o-mini
// have their own counters (gpt-4o-mini a limit of its own), every other
// model, or none, one shared counter; rpm is not keyed by it.
const dimensionsConfig = `
server: {listen: 127.0.0.1:0, admin_listen: 127.0.0.1:0}` + settleHead + `
  rpm: {limits: {"*": {rate: 100, per: 100000s, burst: 100}}}
  tpm:
    by: [model]
    limits: {"*": {rate: 1000, per: 100000s, burst: 1000}}
    values: {GPT-4o-mini: {"*": {rate: 5000, per: 100000s, burst: 5000}}}
dimensions:
  model: {json: model, values: [gpt-4o, GPT-4o-Mini]}
` + chatRoute + `    policies: [rpm, {name: tpm, cost: tokens}]
    measures:
      tokens:
        reserve_from: {json: max_tokens}
        max: 500
        settle_from: {json: usage.total_tokens}
`

// TestDimensionKeysPerModel: on the memory store, Redis and a Cluster, a
// policy by the body's model takes each configured model from its own
// counter with its own limit, and every other model, a body without one
// and a body the gateway does not read from one shared counter, settled
// exactly; a caller sending many model names creates no more keys.
func TestDimensionKeysPerModel(t *testing.T) {
	for _, store := range everyStore {
		t.Run(store.name, func(t *testing.T) {
			addrs, srv := store.start(t)
			sf := newSettleFixtureWith(t, nil, addrs, dimensionsConfig, time.Second)
			post := func(body string, used int) {
				t.Helper()
				resp, b := sf.post(t, 1, fmt.Sprintf("/v1/chat/json?u=%d", used), body, nil)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s: status %d %s", body, resp.StatusCode, b)
				}
			}
			post(`{"model":"gpt-4o","max_tokens":300}`, 120)
			post(`{"model":"gpt-4o-mini","max_tokens":300}`, 100)
			post(`{"model":"GPT-4O-MINI","max_tokens":300}`, 100)
			post(`{"model":"gpt-5","max_tokens":300}`, 50)
			post(`{"max_tokens":300}`, 40)
			post(`{"model":"gpt-4o","model":"gpt-4o-mini","max_tokens":300}`, 30) // ambiguous: the shared bucket
			for i := range 20 {
				post(fmt.Sprintf(`{"model":"spray-%d","max_tokens":1}`, i), 1)
			}
			rep, _ := sf.quota(t, map[string]string{"X-API-Key": "KEY1"})
			got := map[string]int64{}
			for _, q := range rep.Policies {
				got[q.Name+" "+q.By] = q.Remaining
			}
			want := map[string]int64{
				"rpm ":                  100 - 26,
				"tpm model=gpt-4o":      1000 - 120,
				"tpm model=gpt-4o-mini": 5000 - 200,
				"tpm model=*":           1000 - 50 - 40 - 30 - 20,
			}
			if !sameUnits(got, want) {
				t.Errorf("remaining %v, want %v", got, want)
			}
			if srv != nil {
				keys, _ := srv.Do("KEYS", "*:tpm:*")
				if ks, _ := keys.([]any); len(ks) != 3 {
					t.Errorf("tpm keys in Redis: %v, want 3 (two models and the shared bucket)", ks)
				} else if !strings.Contains(fmt.Sprint(ks), "model=*") {
					t.Errorf("tpm keys %v lack the shared bucket", ks)
				}
			}
		})
	}
}

// llmConfig is the LLM policy of the guide: rpm a request, tpm the
// tokens (prompt bound from the body at 4 bytes a token, plus max_tokens
// × n; settled as prompt + completion) per model, spend the usd of each
// request in micro-USD, priced per model, over a calendar month.
const llmConfig = `
server: {listen: 127.0.0.1:0, admin_listen: 127.0.0.1:0}` + settleHead + `
  rpm:   {limits: {"*": {rate: 100, per: 100000s, burst: 100}}}
  tpm:   {by: [model], limits: {"*": {rate: 100000, per: 10000s, burst: 100000}}}
  spend: {algorithm: fixed_window, limits: {"*": {rate: 50000, calendar: {unit: month}}}}
dimensions:
  model: {json: model, values: [gpt-4o, gpt-4o-mini]}
prices:
  gpt-4o: {input: "2.50", output: "10.00"}
  "*":    {input: "0.15", output: "0.60"}
` + chatRoute + `
    policies: [rpm, {name: tpm, cost: tokens}, {name: spend, cost: usd}]
    measures:
      tokens:
        reserve_from: {json: max_tokens, json_count: n, prompt_bytes_per_token: 4}
        max: 32000
        settle: usage.prompt_tokens + usage.completion_tokens
      usd:
        reserve: 1000
        settle: (usage.prompt_tokens * price(model).input + usage.completion_tokens * price(model).output) / 1000
`

// TestLLMPolicy: one route limits requests, tokens per model and money
// together: tokens reserve max_tokens × n plus the prompt's bound from
// the body's size and settle to prompt + completion (from JSON and from
// an SSE stream), usd settles to the price of the model's tokens in
// micro-USD, rounded up, and the monthly budget runs out (the request
// that crosses it is charged in full, the next is denied by spend) and
// comes back in the next calendar month; on every store.
func TestLLMPolicy(t *testing.T) {
	for _, store := range everyStore {
		t.Run(store.name, func(t *testing.T) {
			addrs, _ := store.start(t)
			sf := newSettleFixtureWith(t, nil, addrs, llmConfig, time.Second)
			cfg, err := config.Load(sf.path, testGetenv)
			if err != nil {
				t.Fatal(err)
			}
			body := `{"model":"gpt-4o","max_tokens":500,"n":2,"messages":[{"role":"user","content":"` + strings.Repeat("x", 200) + `"}]}`
			h := http.Header{"Content-Type": {"application/json"}}
			ex, err := Explain(cfg, ExplainRequest{Method: "POST", Path: "/v1/chat/llm", Credential: "KEY1", Header: h, Body: []byte(body)}, testGetenv)
			if err != nil {
				t.Fatal(err)
			}
			if ex.Dimension != "model=gpt-4o" {
				t.Errorf("explain: dimension %q, want model=gpt-4o", ex.Dimension)
			}
			if want := int64(1000 + (len(body)+3)/4); ex.Measures[0].Name != "tokens" || ex.Measures[0].Reserve != want {
				t.Errorf("explain: %+v, want tokens reserving %d (1000 asked + the prompt's bound)", ex.Measures, want)
			}
			post := func(mode, model string, p, c int) int {
				t.Helper()
				resp, b := sf.post(t, 1, fmt.Sprintf("/v1/chat/%s?p=%d&c=%d", mode, p, c), `{"model":"`+model+`","max_tokens":500}`, nil)
				if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
					t.Fatalf("status %d %s", resp.StatusCode, b)
				}
				if resp.StatusCode == http.StatusTooManyRequests && deniedBy(t, b) != "spend" {
					t.Fatalf("denied by %s, want spend", deniedBy(t, b))
				}
				return resp.StatusCode
			}
			remaining := func() map[string]int64 {
				rep, _ := sf.quota(t, map[string]string{"X-API-Key": "KEY1"})
				got := map[string]int64{}
				for _, q := range rep.Policies {
					got[q.Name+" "+q.By] = q.Remaining
				}
				return got
			}
			post("llm", "gpt-4o", 1000, 500)          // 1000 × 2500 + 500 × 10000 nano-USD: 7500 µUSD
			post("llm-sse", "gpt-4o-mini", 1000, 999) // 1000 × 150 + 999 × 600 = 749400 nano: 750 µUSD
			post("llm", "gpt-5", 3, 0)                // 3 × 150 = 450 nano: rounded up to 1 µUSD
			want := map[string]int64{"rpm ": 97, "spend ": 50000 - 7500 - 750 - 1,
				"tpm model=gpt-4o": 100000 - 1500, "tpm model=gpt-4o-mini": 100000 - 1999, "tpm model=*": 100000 - 3}
			if got := remaining(); !sameUnits(got, want) {
				t.Errorf("remaining %v, want %v", got, want)
			}
			// 25000 µUSD a request: the second crosses the budget and is
			// charged in full; the third is denied by spend.
			for range 2 {
				if post("llm", "gpt-4o", 2000, 2000) != http.StatusOK {
					t.Fatal("a request within the budget was denied")
				}
			}
			if got := remaining()["spend "]; got != 0 {
				t.Errorf("spend remaining %d after crossing the budget, want 0", got)
			}
			if post("llm", "gpt-4o", 1, 1) != http.StatusTooManyRequests {
				t.Error("a request past the monthly budget was admitted")
			}
			sf.clock.Add(32 * 24 * time.Hour) // into the next calendar month
			if post("llm", "gpt-4o", 1, 1) != http.StatusOK {
				t.Error("the budget did not come back in the next month")
			}
			if got := remaining()["spend "]; got != 50000-13 {
				t.Errorf("spend remaining %d in the new month, want %d (12.5 µUSD, rounded up)", got, 50000-13)
			}
		})
	}
}

// TestSignalClassOfPolicyCosts: for OpenAI's x-ratelimit-* headers, a
// policy whose cost is a number counts requests, one whose cost is a
// settled measure tokens, a priced measure (money) and a concurrency
// policy are not reported, and stage 1 takes the route's cost: requests.
func TestSignalClassOfPolicyCosts(t *testing.T) {
	text := strings.NewReplacer("{name: spend, cost: usd}]", "{name: spend, cost: usd}, slots]",
		"\ndimensions:", "\n  slots: {algorithm: concurrency, limits: {\"*\": {max: 5}}}\ndimensions:").Replace(llmConfig)
	sf := newSettleFixtureWith(t, nil, nil, text, time.Second)
	rt := sf.gw.live.Load().routes[0]
	want := map[string]signalClass{"rpm": signalRequests, "tpm": signalTokens, "spend": signalNone, "slots": signalNone}
	ps := rt.policyFor("t", usage.Other)
	if len(ps) != len(want) {
		t.Fatalf("%d policies bound, want %d", len(ps), len(want))
	}
	for i := range ps {
		if got := policySignalClass(rt, &ps[i]); got != want[ps[i].name] {
			t.Errorf("%s: class %d, want %d", ps[i].name, got, want[ps[i].name])
		}
	}
	if got := policySignalClass(rt, nil); got != signalRequests {
		t.Errorf("stage 1: class %d, want requests", got)
	}
}

// boundConfig is llmConfig with a budget of 30000 µUSD a month whose usd
// reserves, instead of a fixed 1000, its settle expression on the token
// bounds of measure tokens (the prompt's at 4 bytes a token, max_tokens ×
// n), at most 30000.
var boundConfig = strings.NewReplacer(
	`rate: 50000, calendar`, `rate: 30000, calendar`,
	"        reserve: 1000\n", "        reserve_from: {measure: tokens}\n        max: 30000\n",
).Replace(llmConfig)

// chatBody returns a chat request body of exactly size bytes for model
// asking for maxTokens.
func chatBody(t *testing.T, model string, maxTokens, size int) string {
	t.Helper()
	head := `{"model":"` + model + `","max_tokens":` + strconv.Itoa(maxTokens) + `,"messages":[{"role":"user","content":"`
	tail := `"}]}`
	if pad := size - len(head) - len(tail); pad >= 0 {
		return head + strings.Repeat("x", pad) + tail
	}
	t.Fatalf("a body of %d bytes cannot hold %s%s", size, head, tail)
	return ""
}

// TestMoneyReservedFromTokenBounds: on every store, a gpt-4o request of
// max_tokens 1000 in a 400-byte body reserves from the budget exactly the
// price of its bounds, (400/4 × 2500 + 1000 × 10000) / 1000 = 10250 µUSD
// (as explain says), and settles to the exact price of what it used; once
// less is left than a request's bound, that request is denied by spend
// and a smaller one admitted; a body that states no bound reserves max.
func TestMoneyReservedFromTokenBounds(t *testing.T) {
	for _, store := range everyStore {
		t.Run(store.name, func(t *testing.T) {
			addrs, _ := store.start(t)
			sf := newSettleFixtureWith(t, nil, addrs, boundConfig, time.Second)
			body := chatBody(t, "gpt-4o", 1000, 400)
			post := func(path, body string, status int) {
				t.Helper()
				resp, b := sf.post(t, 1, path, body, nil)
				if resp.StatusCode != status {
					t.Fatalf("%s: status %d %s, want %d", path, resp.StatusCode, b, status)
				}
				if status == http.StatusTooManyRequests && deniedBy(t, b) != "spend" {
					t.Fatalf("%s: denied by %s, want spend", path, deniedBy(t, b))
				}
			}
			expect := func(step string, want map[string]int64) {
				t.Helper()
				rep, _ := sf.quota(t, map[string]string{"X-API-Key": "KEY1"})
				got := map[string]int64{}
				for _, q := range rep.Policies {
					if q.By == "" || q.By == "model=gpt-4o" {
						got[q.Name] = q.Remaining
					}
				}
				if !sameUnits(got, want) {
					t.Errorf("%s: remaining %v, want %v", step, got, want)
				}
			}

			cfg, err := config.Load(sf.path, testGetenv)
			if err != nil {
				t.Fatal(err)
			}
			ex, err := Explain(cfg, ExplainRequest{Method: "POST", Path: "/v1/chat/missing", Credential: "KEY1",
				Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(body)}, testGetenv)
			if err != nil {
				t.Fatal(err)
			}
			if len(ex.Measures) != 2 || ex.Measures[1].Name != "usd" || ex.Measures[1].Reserve != 10250 || ex.Measures[1].ReserveWhy != "bound" {
				t.Errorf("explain: measures %+v, want usd reserving 10250 (bound)", ex.Measures)
			}
			// n: 2 doubles the completion's bound; a 42-byte body bounds the
			// prompt at 11 tokens: (11 × 2500 + 2000 × 10000) / 1000 =
			// 20027.5, rounded up.
			ex, err = Explain(cfg, ExplainRequest{Method: "POST", Path: "/v1/chat/missing", Credential: "KEY1",
				Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"model":"gpt-4o","max_tokens":1000,"n":2}`)}, testGetenv)
			if err != nil {
				t.Fatal(err)
			}
			if len(ex.Measures) != 2 || ex.Measures[0].Reserve != 2011 || ex.Measures[1].Reserve != 20028 {
				t.Errorf("explain with n 2: measures %+v, want tokens 2011 and usd 20028", ex.Measures)
			}

			// A response without a usage leaves the reservation standing:
			// what the gateway reserved, 10250 µUSD and 1100 tokens.
			post("/v1/chat/missing", body, http.StatusOK)
			expect("reserved", map[string]int64{"rpm": 99, "tpm": 100000 - 1100, "spend": 30000 - 10250})

			// 50 prompt and 200 completion tokens: 50 × 2500 + 200 × 10000
			// nano-USD, 2125 µUSD, of the 10250 reserved.
			post("/v1/chat/llm?p=50&c=200", body, http.StatusOK)
			expect("settled", map[string]int64{"rpm": 98, "tpm": 100000 - 1100 - 250, "spend": 19750 - 2125})
			// 1000 completion tokens: 10000 µUSD.
			post("/v1/chat/llm?p=0&c=1000", body, http.StatusOK)
			expect("settled again", map[string]int64{"rpm": 97, "tpm": 100000 - 1100 - 250 - 1000, "spend": 17625 - 10000})

			// 7625 left: the same request's bound of 10250 does not fit,
			// nothing is taken; one of max_tokens 500 (5250) does, and
			// settles to 10 × 2500 + 10 × 10000 nano-USD: 125 µUSD.
			post("/v1/chat/llm?p=10&c=10", body, http.StatusTooManyRequests)
			post("/v1/chat/llm?p=10&c=10", chatBody(t, "gpt-4o", 500, 400), http.StatusOK)
			expect("near the end", map[string]int64{"rpm": 96, "tpm": 100000 - 1100 - 250 - 1000 - 20, "spend": 7625 - 125})

			// A body without max_tokens states no bound: tokens reserve
			// their max, usd its max of 30000, more than is left.
			post("/v1/chat/llm?p=1&c=1", `{"model":"gpt-4o"}`, http.StatusTooManyRequests)
			expect("no bound", map[string]int64{"rpm": 96, "tpm": 100000 - 2370, "spend": 7500})

			// A caller hiding its prompt's size (a chunked body) or its JSON
			// (another content type) behind a small max_tokens, whose bound
			// would fit, gets no bound either: usd reserves its max.
			small := chatBody(t, "gpt-4o", 10, 100) // its bound, 163 µUSD, fits in the 7500 left
			for name, hdr := range map[string]map[string]string{"chunked": nil, "text/plain": {"Content-Type": "text/plain"}} {
				var body io.Reader = strings.NewReader(small)
				if name == "chunked" {
					body = io.MultiReader(body) // no length known: sent chunked
				}
				resp, b := sf.postBody(t, 1, "/v1/chat/llm?p=1&c=1", body, hdr)
				if resp.StatusCode != http.StatusTooManyRequests || deniedBy(t, b) != "spend" {
					t.Errorf("%s body of max_tokens 10: %d %s, want 429 by spend (usd reserves its max)", name, resp.StatusCode, b)
				}
			}
			expect("hidden bounds", map[string]int64{"rpm": 96, "tpm": 100000 - 2370, "spend": 7500})
			// The same body sent plainly states its bounds and is admitted:
			// 1 + 1 tokens, (2500 + 10000) / 1000 rounded up, 13 µUSD.
			post("/v1/chat/llm?p=1&c=1", small, http.StatusOK)
			expect("stated bounds", map[string]int64{"rpm": 95, "tpm": 100000 - 2372, "spend": 7500 - 13})
		})
	}
}

// TestCachedTokensPricedApart: on every store, a settle expression that
// subtracts prices the cached part of the prompt at its own price: 1000
// prompt tokens, 800 cached, and 100 completion tokens of gpt-4o settle
// to (200 × 2500 + 800 × 1250 + 100 × 10000) / 1000 = 2500 µUSD; more
// cached than prompt tokens prices the prompt at 0, not below.
func TestCachedTokensPricedApart(t *testing.T) {
	text := strings.NewReplacer(
		`gpt-4o: {input: "2.50", output: "10.00"}`, `gpt-4o: {input: "2.50", output: "10.00", cached: "1.25"}`,
		"settle: (usage.prompt_tokens * price(model).input + usage.completion_tokens * price(model).output) / 1000",
		"settle: ((usage.prompt_tokens - usage.prompt_tokens_details.cached_tokens) * price(model).input"+
			" + usage.prompt_tokens_details.cached_tokens * price(model).cached + usage.completion_tokens * price(model).output) / 1000",
	).Replace(llmConfig)
	for _, store := range everyStore {
		t.Run(store.name, func(t *testing.T) {
			addrs, _ := store.start(t)
			sf := newSettleFixtureWith(t, nil, addrs, text, time.Second)
			spend := func() int64 {
				t.Helper()
				rep, _ := sf.quota(t, map[string]string{"X-API-Key": "KEY1"})
				for _, q := range rep.Policies {
					if q.Name == "spend" {
						return q.Remaining
					}
				}
				t.Fatal("no spend in /_quota")
				return 0
			}
			for _, c := range []struct {
				query string
				price int64
			}{
				{"p=1000&k=800&c=100", 2500},
				{"p=100&k=300&c=10", 475}, // (0 × 2500 + 300 × 1250 + 10 × 10000) / 1000
			} {
				before := spend()
				resp, b := sf.post(t, 1, "/v1/chat/llm?"+c.query, `{"model":"gpt-4o","max_tokens":500}`, nil)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s: status %d %s", c.query, resp.StatusCode, b)
				}
				if took := before - spend(); took != c.price {
					t.Errorf("%s: spend took %d µUSD, want %d", c.query, took, c.price)
				}
			}
		})
	}
}
