package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/quotagate/quotagate/internal/redistest"
)

// TestFleetRequestsAndTokensOnOneRoute: two gateways on one Redis limit
// one route by requests (rpm, 20) and tokens (tpm, 1000, the measure
// tokens: max_tokens reserved, usage.total_tokens settled) at once. With
// small requests, 30 concurrent ones admit exactly 20 (rpm binds) and
// take exactly 20 × their usage from tpm; with requests of 100 tokens
// that use them all, 30 admit exactly 10 (tpm binds) and take exactly 10
// requests from rpm; sequential requests that use less than they reserve
// are refunded exactly, across both gateways.
func TestFleetRequestsAndTokensOnOneRoute(t *testing.T) {
	rs := redistest.StartStandalone(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"choices":[],"usage":{"total_tokens":%s}}`, r.URL.Query().Get("u"))
	}))
	t.Cleanup(up.Close)
	cfg := limiterConfig(up.URL, []string{rs.Addr}, "small", "large", "refund")
	cfg.Policies["rpm"] = policyCfg{OnStoreError: "closed", Limits: map[string]limitCfg{"std": bucket(1, "1h", 20)}}
	cfg.Policies["tpm"] = policyCfg{OnStoreError: "closed", Limits: map[string]limitCfg{"std": bucket(1, "1h", 1000)}}
	cfg.Routes = append(cfg.Routes, routeCfg{Name: "chat", Method: "POST", Path: "/v1/chat", Upstream: "up",
		Policies: []any{"rpm", map[string]any{"name": "tpm", "cost": "tokens"}},
		Measures: map[string]any{"tokens": map[string]any{"reserve_from": map[string]any{"json": "max_tokens"}, "max": 500,
			"settle_from": map[string]any{"json": "usage.total_tokens"}}}})
	gws := startGateways(t, 2, cfg)

	// over sends 30 concurrent requests of key over both gateways.
	over := func(key string, maxTokens, used int) (admitted int, denied map[string]int) {
		return burst(30, func(i int) (int, string) { return chat(t, gws[i%2], key, maxTokens, used) })
	}
	admitted, denied := over("key-small", 10, 5)
	if admitted != 20 || denied["429 rpm"] != 10 || len(denied) != 1 {
		t.Errorf("small requests: %d admitted, denied %v; want 20 admitted and 10 denied by rpm", admitted, denied)
	}
	waitRemaining(t, gws[1], "key-small", "tpm", 1000-20*5, "small requests")
	waitRemaining(t, gws[1], "key-small", "rpm", 0, "small requests")

	admitted, denied = over("key-large", 100, 100)
	if admitted != 10 || denied["429 tpm"] != 20 || len(denied) != 1 {
		t.Errorf("large requests: %d admitted, denied %v; want 10 admitted and 20 denied by tpm", admitted, denied)
	}
	waitRemaining(t, gws[0], "key-large", "tpm", 0, "large requests")
	waitRemaining(t, gws[0], "key-large", "rpm", 20-10, "large requests")

	for i := range 3 {
		if status, _ := chat(t, gws[i%2], "key-refund", 300, 120); status != http.StatusOK {
			t.Fatalf("refund request %d: status %d", i, status)
		}
	}
	waitRemaining(t, gws[1], "key-refund", "tpm", 1000-3*120, "refunded requests")
	waitRemaining(t, gws[1], "key-refund", "rpm", 17, "refunded requests")
}

// chat posts a chat request of key asking maxTokens, whose upstream
// reports used, and returns the status and, for a 429, the policy named.
func chat(t *testing.T, gw *gateway, key string, maxTokens, used int) (int, string) {
	return postChat(t, gw, key, fmt.Sprintf("u=%d", used), fmt.Sprintf(`{"model":"m","max_tokens":%d}`, maxTokens))
}

// postChat posts body (JSON) to /v1/chat?query as key and returns the status
// and, for a 429, the policy named.
func postChat(t *testing.T, gw *gateway, key, query, body string) (int, string) {
	req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/chat?"+query, strings.NewReader(body))
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("chat: %v", err)
		return 0, ""
	}
	defer resp.Body.Close()
	var p struct{ Policy string }
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &p)
	return resp.StatusCode, p.Policy
}

// burst sends n requests at once, request i by send (which returns its
// status and the policy that denied it), and returns how many were
// admitted (200) and the others counted by "status policy".
func burst(n int, send func(i int) (status int, policy string)) (admitted int, denied map[string]int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	denied = map[string]int{}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, policy := send(i)
			mu.Lock()
			defer mu.Unlock()
			if status == http.StatusOK {
				admitted++
			} else {
				denied[fmt.Sprint(status, " ", policy)]++
			}
		}()
	}
	wg.Wait()
	return admitted, denied
}

// llmFleetConfig is the configuration of the fleet LLM tests on the
// Redis at addr, for the tenants given: an upstream answering the usage
// ?p= prompt and ?c= completion tokens; tpm keyed by the body's model
// (gpt-4o 1000 tokens, gpt-4o-mini 5000, any other 100000), spend a
// monthly budget of 100000 µUSD priced per model; and the route chat
// (POST /v1/chat) taking measures (tokens and usd) from them.
func llmFleetConfig(t *testing.T, addr string, measures map[string]any, tenants ...string) *gwConfig {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		q := r.URL.Query()
		fmt.Fprintf(w, `{"choices":[],"usage":{"prompt_tokens":%s,"completion_tokens":%s}}`, q.Get("p"), q.Get("c"))
	}))
	t.Cleanup(up.Close)
	cfg := limiterConfig(up.URL, []string{addr}, tenants...)
	cfg.Dimensions = map[string]any{"model": map[string]any{"json": "model", "values": []string{"gpt-4o", "gpt-4o-mini"}}}
	cfg.Prices = map[string]any{"gpt-4o": map[string]any{"input": "2.50", "output": "10.00"},
		"gpt-4o-mini": map[string]any{"input": "0.15", "output": "0.60"}, "*": map[string]any{"input": "2.50", "output": "10.00"}}
	cfg.Policies["tpm"] = policyCfg{OnStoreError: "closed", By: []string{"model"}, Limits: map[string]limitCfg{"std": bucket(1, "1h", 100000)},
		Values: map[string]map[string]limitCfg{"gpt-4o": {"std": bucket(1, "1h", 1000)}, "gpt-4o-mini": {"std": bucket(1, "1h", 5000)}}}
	cfg.Policies["spend"] = policyCfg{OnStoreError: "closed", Algorithm: "fixed_window",
		Limits: map[string]limitCfg{"std": {Rate: 100000, Calendar: map[string]any{"unit": "month"}}}}
	cfg.Routes = append(cfg.Routes, routeCfg{Name: "chat", Method: "POST", Path: "/v1/chat", Upstream: "up",
		Policies: []any{map[string]any{"name": "tpm", "cost": "tokens"}, map[string]any{"name": "spend", "cost": "usd"}},
		Measures: measures})
	return cfg
}

// TestFleetPerModelLimitsAndBudget: two gateways on one Redis key tpm by
// the body's model (gpt-4o 1000 tokens, gpt-4o-mini 5000, any other
// model 100000) and charge a monthly budget of 100000 µUSD at each
// model's price. 30 concurrent gpt-4o requests of 100 tokens admit
// exactly 10, 30 of gpt-4o-mini all 30, each model's counter and the
// budget exact; then requests of 50000 µUSD each spend the budget: the
// second empties it, the third is denied by spend.
func TestFleetPerModelLimitsAndBudget(t *testing.T) {
	rs := redistest.StartStandalone(t)
	cfg := llmFleetConfig(t, rs.Addr, map[string]any{
		"tokens": map[string]any{"reserve_from": map[string]any{"json": "max_tokens"}, "max": 500,
			"settle": "usage.prompt_tokens + usage.completion_tokens"},
		"usd": map[string]any{"reserve": 1000,
			"settle": "(usage.prompt_tokens * price(model).input + usage.completion_tokens * price(model).output) / 1000"}},
		"models", "budget")
	gws := startGateways(t, 2, cfg)

	send := func(gw *gateway, key, model string, maxTokens, p, c int) (int, string) {
		return postChat(t, gw, key, fmt.Sprintf("p=%d&c=%d", p, c), fmt.Sprintf(`{"model":%q,"max_tokens":%d}`, model, maxTokens))
	}
	models := func(model string) (admitted int, denied map[string]int) {
		return burst(30, func(i int) (int, string) { return send(gws[i%2], "key-models", model, 100, 50, 50) })
	}
	if admitted, denied := models("gpt-4o"); admitted != 10 || denied["429 tpm"] != 20 {
		t.Errorf("gpt-4o: %d admitted, denied %v; want 10, and 20 by tpm", admitted, denied)
	}
	if admitted, denied := models("GPT-4o-mini"); admitted != 30 {
		t.Errorf("gpt-4o-mini: %d admitted, denied %v; want all 30 (its own limit)", admitted, denied)
	}
	// 10 × (50 × 2500 + 50 × 10000) nano-USD = 6250 µUSD, and 30 × ceil(37.5) = 1140.
	waitRemaining(t, gws[1], "key-models", "spend", 100000-6250-1140, "the budget after both models")
	if got := quotaBy(t, gws[0], "key-models", "tpm"); got["model=gpt-4o"] != 0 || got["model=gpt-4o-mini"] != 5000-3000 || got["model=*"] != 100000 {
		t.Errorf("tpm per model %v, want gpt-4o 0, gpt-4o-mini 2000, the others untouched", got)
	}

	// 4000 × 2500 + 4000 × 10000 nano-USD = 50000 µUSD a request.
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		status, policy := send(gws[i%2], "key-budget", "gpt-5", 100, 4000, 4000)
		if status != want || status == http.StatusTooManyRequests && policy != "spend" {
			t.Fatalf("budget request %d: %d %s, want %d", i, status, policy, want)
		}
		if i == 1 {
			waitRemaining(t, gws[0], "key-budget", "spend", 0, "the budget spent")
		}
	}
}

// quotaBy reads policy's remaining per dimension value from GET /_quota
// as key.
func quotaBy(t *testing.T, gw *gateway, key, policy string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, p := range readQuota(t, gw.URL, key) {
		if p.Name == policy {
			out[p.By] = p.Remaining
		}
	}
	return out
}

// TestFleetBudgetReservesTokenBounds: two gateways on one Redis, the
// budget of 100000 µUSD reserving each request's price at its bounds
// (reserve_from: {measure: tokens}). 30 concurrent gpt-5 requests of
// max_tokens 1000 in a 35-byte body (a prompt of at most 9 tokens) each
// reserve (9 × 2500 + 1000 × 10000) / 1000 = 10022.5, 10023 µUSD, and use
// their bounds: exactly 9 are admitted (90207), 21 denied by spend, and
// the budget keeps 9793, never in debt.
func TestFleetBudgetReservesTokenBounds(t *testing.T) {
	rs := redistest.StartStandalone(t)
	cfg := llmFleetConfig(t, rs.Addr, map[string]any{
		"tokens": map[string]any{"reserve_from": map[string]any{"json": "max_tokens", "prompt_bytes_per_token": 4}, "max": 1000,
			"settle": "usage.prompt_tokens + usage.completion_tokens"},
		"usd": map[string]any{"reserve_from": map[string]any{"measure": "tokens"}, "max": 50000,
			"settle": "(usage.prompt_tokens * price(model).input + usage.completion_tokens * price(model).output) / 1000"}},
		"bound")
	gws := startGateways(t, 2, cfg)
	const body = `{"model":"gpt-5","max_tokens":1000}` // 35 bytes
	admitted, denied := burst(30, func(i int) (int, string) { return postChat(t, gws[i%2], "key-bound", "p=9&c=1000", body) })
	if admitted != 9 || denied["429 spend"] != 21 {
		t.Errorf("%d admitted, denied %v; want 9, and 21 by spend", admitted, denied)
	}
	waitRemaining(t, gws[1], "key-bound", "spend", 100000-9*10023, "the budget after the burst")
}
