package e2e

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
)

// TestRetryTimeForLargerCost: a real gateway on Redis, a token policy of
// 3000 refilling 1000 a second, emptied by one request. A small request
// (1300 tokens) is denied and the denial remembered; a larger one (2140)
// right after must be told its own wait, 840 ms more than what is left of
// the smaller one's (not the remembered, too early time), and a request
// sent at the time it was told is admitted.
func TestRetryTimeForLargerCost(t *testing.T) {
	rs := redistest.StartStandalone(t)
	up := llmUpstream(t)
	cfg := limiterConfig(up.URL, []string{rs.Addr}, "big")
	cfg.Policies["tpm"] = policyCfg{OnStoreError: "closed", Limits: map[string]limitCfg{"std": bucket(1000, "1s", 3000)}}
	cfg.Routes = append(cfg.Routes, routeCfg{Name: "chat", Method: "POST", Path: "/v1/chat/completions", Upstream: "up",
		Policies: []any{"tpm"}, ClientSignals: "openai",
		Cost: map[string]any{"reserve": 100, "max": 3000, "reserve_from": map[string]any{"json": "max_tokens"},
			"settle_from": map[string]any{"json": "usage.total_tokens"}}})
	gw := startGateway(t, "gw", cfg)
	ask := func(tokens int) (status int, retryMS int64) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","max_tokens":`+strconv.Itoa(tokens)+`}`))
		req.Header.Set("Authorization", "Bearer key-big")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if v := resp.Header.Get("retry-after-ms"); v != "" {
			retryMS, _ = strconv.ParseInt(v, 10, 64)
		}
		return resp.StatusCode, retryMS
	}
	if st, _ := ask(3000); st != http.StatusOK {
		t.Fatalf("emptying the bucket: %d", st)
	}
	small := time.Now()
	st, r1 := ask(1300)
	if st != http.StatusTooManyRequests || r1 <= 0 || r1 > 1300 {
		t.Fatalf("small request: %d retry-after-ms %d, want 429 within 1300 ms", st, r1)
	}
	st, r2 := ask(2140)
	answered := time.Now()
	if st != http.StatusTooManyRequests {
		t.Fatalf("larger request: %d, want 429", st)
	}
	// The larger request's wait is the smaller one's, as it stood when the
	// larger was decided (at most the time since the small one was sent
	// has passed), plus 840 tokens at 1000 a second.
	gap := answered.Sub(small).Milliseconds() + 1
	t.Logf("small told %d ms; larger told %d ms (%d ms between them at most)", r1, r2, gap)
	if r2 < r1+840-gap {
		t.Errorf("wrong answer: the larger request was told %d ms, under its true wait of at least %d ms", r2, r1+840-gap)
	}
	if r2 > r1+840+1 {
		t.Errorf("wrong answer: the larger request was told %d ms, over the %d ms it needs", r2, r1+840+1)
	}
	time.Sleep(time.Until(answered.Add(time.Duration(r2) * time.Millisecond)))
	if st, r := ask(2140); st != http.StatusOK {
		t.Errorf("wrong answer: at the told time the larger request got %d (retry-after-ms %d)", st, r)
	}
}
