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

	// burst sends n concurrent requests of key over both gateways and
	// returns how many were admitted and, per policy, how many denied.
	burst := func(key string, n int, maxTokens, used int) (admitted int, deniedBy map[string]int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		deniedBy = map[string]int{}
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				status, policy := chat(t, gws[i%2], key, maxTokens, used)
				mu.Lock()
				defer mu.Unlock()
				switch status {
				case http.StatusOK:
					admitted++
				case http.StatusTooManyRequests:
					deniedBy[policy]++
				default:
					t.Errorf("status %d", status)
				}
			}()
		}
		wg.Wait()
		return admitted, deniedBy
	}

	admitted, denied := burst("key-small", 30, 10, 5)
	if admitted != 20 || denied["rpm"] != 10 || len(denied) != 1 {
		t.Errorf("small requests: %d admitted, denied %v; want 20 admitted and 10 denied by rpm", admitted, denied)
	}
	waitRemaining(t, gws[1], "key-small", "tpm", 1000-20*5, "small requests")
	waitRemaining(t, gws[1], "key-small", "rpm", 0, "small requests")

	admitted, denied = burst("key-large", 30, 100, 100)
	if admitted != 10 || denied["tpm"] != 20 || len(denied) != 1 {
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
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/v1/chat?u=%d", gw.URL, used),
		strings.NewReader(fmt.Sprintf(`{"model":"m","max_tokens":%d}`, maxTokens)))
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
