package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// signalsConfig has an OpenAI-style route (client_signals: openai,
// server-wide) with a request policy and a token policy, a route whose
// token policy waits over a minute, and one that keeps problem+json.
const signalsConfig = `
server: {listen: 127.0.0.1:0, admin_listen: 127.0.0.1:0, client_signals: openai}
identity:
  api_keys:
    - {key_sha256: FREEHASH, tenant: acme, tier: free}
tiers: {free: {}}
policies:
  rpm: {limits: {"*": {rate: 10000, per: 1m, burst: 10000}}}
  tpm: {limits: {"*": {rate: 100, per: 1s, burst: 3000}}}
  tpd: {limits: {"*": {rate: 1000, per: 1h, burst: 1000}}}
  other: {limits: {"*": {rate: 1000, per: 1h, burst: 1000}}}
upstreams:
  llm: {url: UPSTREAM}
routes:
  - name: chat
    method: POST
    path: /v1/chat/completions
    upstream: llm
    policies: [rpm, tpm]
    cost: {reserve: 100, reserve_from: {json: max_tokens}, max: 3000, settle_from: {json: usage.total_tokens}, settle_policies: [tpm]}
  - name: daily
    method: POST
    path: /v1/daily
    upstream: llm
    policies: [tpd]
    cost: {reserve: 100, reserve_from: {json: max_tokens}, max: 1000}
  - name: plain
    method: POST
    path: /v1/plain
    upstream: llm
    client_signals: none
    policies: [other]
    cost: {reserve: 100, reserve_from: {json: max_tokens}, max: 1000}
`

// openAIBody decodes OpenAI's error envelope of a response with status.
func openAIBody(t *testing.T, w *httptest.ResponseRecorder, status int) openAIErrorBody {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d: %s", w.Code, status, w.Body.String())
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json", ct)
	}
	var raw map[string]map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &raw); err != nil {
		t.Fatalf("body %s: %v", w.Body.String(), err)
	}
	e, ok := raw["error"]
	if !ok {
		t.Fatalf("no error object: %s", w.Body.String())
	}
	if p, ok := e["param"]; !ok || p != nil {
		t.Errorf("param %v (present %v), want null", p, ok)
	}
	var b openAIError
	_ = json.Unmarshal(w.Body.Bytes(), &b)
	return b.Error
}

func chat(f *fixture, path string, maxTokens int) *httptest.ResponseRecorder {
	return f.do(http.MethodPost, path, map[string]string{"Authorization": "Bearer " + freeKey, "Content-Type": "application/json"},
		strings.NewReader(`{"model":"m","max_tokens":`+strconv.Itoa(maxTokens)+`}`))
}

func TestOpenAISignals(t *testing.T) {
	f := newFixture(t, signalsConfig)
	t0 := f.clock.Now()

	w := chat(f, "/v1/chat/completions", 3000)
	if w.Code != http.StatusOK {
		t.Fatalf("first request: %d %s", w.Code, w.Body.String())
	}
	want := map[string]string{
		"x-ratelimit-limit-tokens": "3000", "x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "30s",
		// rpm takes the reservation too (every policy of the route does), and is a request policy.
		"x-ratelimit-limit-requests": "10000", "x-ratelimit-remaining-requests": "7000", "x-ratelimit-reset-requests": "18s",
	}
	for k, v := range want {
		if got := w.Header().Values(k); len(got) != 1 || got[0] != v {
			t.Errorf("allowed: %s = %q, want %q", k, got, v)
		}
	}

	// A small request is denied for 13 s, exactly.
	w = chat(f, "/v1/chat/completions", 1300)
	e := openAIBody(t, w, http.StatusTooManyRequests)
	if e.Code != "rate_limit_exceeded" || e.Type != "tokens" || !strings.Contains(e.Message, "policy tpm") || !strings.Contains(e.Message, "try again in 13s") {
		t.Errorf("429 body %+v", e)
	}
	if got := w.Header().Get("retry-after-ms"); got != "13000" {
		t.Errorf("retry-after-ms %q, want 13000", got)
	}
	if ra, _ := strconv.Atoi(w.Header().Get("Retry-After")); ra < 13 {
		t.Errorf("Retry-After %d, want >= 13", ra)
	}
	if got := w.Header().Get("x-should-retry"); got != "" {
		t.Errorf("x-should-retry %q within a minute", got)
	}
	if got := w.Header().Get("x-ratelimit-remaining-tokens"); got != "0" {
		t.Errorf("429: x-ratelimit-remaining-tokens %q", got)
	}

	// A larger one a second later is told its own wait (21.4 s from t0),
	// not what is left of the smaller one's 13 s; at that time it fits.
	f.clock.Set(t0.Add(time.Second))
	w = chat(f, "/v1/chat/completions", 2140)
	openAIBody(t, w, http.StatusTooManyRequests)
	if got := w.Header().Get("retry-after-ms"); got != "20400" {
		t.Errorf("larger request: retry-after-ms %q, want 20400", got)
	}
	f.clock.Set(t0.Add(21400 * time.Millisecond))
	if w = chat(f, "/v1/chat/completions", 2140); w.Code != http.StatusOK {
		t.Errorf("at the told time: %d %s", w.Code, w.Body.String())
	}

	// A reservation past the route's max: 400 in the envelope.
	w = chat(f, "/v1/chat/completions", 5000)
	if e := openAIBody(t, w, http.StatusBadRequest); e.Type != "invalid_request_error" || e.Code != codeBadRequest || !strings.Contains(e.Message, "5000") {
		t.Errorf("400 body %+v", e)
	}

	// Past a minute's wait the SDKs would not wait: x-should-retry: false.
	if w = chat(f, "/v1/daily", 1000); w.Code != http.StatusOK {
		t.Fatalf("daily: %d", w.Code)
	}
	w = chat(f, "/v1/daily", 100)
	openAIBody(t, w, http.StatusTooManyRequests)
	if got := w.Header().Get("x-should-retry"); got != "false" {
		t.Errorf("a 6 minute wait: x-should-retry %q, want false", got)
	}
	if got := w.Header().Get("retry-after-ms"); got != "360000" {
		t.Errorf("daily: retry-after-ms %q, want 360000", got)
	}

	// A route with client_signals: none keeps problem+json and the
	// gateway's own headers only.
	w = chat(f, "/v1/plain", 1000)
	if w.Code != http.StatusOK {
		t.Fatalf("plain: %d", w.Code)
	}
	w = chat(f, "/v1/plain", 100)
	problemBody(t, w, http.StatusTooManyRequests, codeRateLimited)
	for _, k := range []string{"retry-after-ms", "x-ratelimit-limit-tokens", "x-ratelimit-limit-requests", "x-should-retry"} {
		if got := w.Header().Get(k); got != "" {
			t.Errorf("plain route: %s = %q", k, got)
		}
	}
}

func TestFormatReset(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"}, {time.Microsecond, "1ms"}, {20 * time.Millisecond, "20ms"}, {time.Second, "1s"},
		{17200 * time.Millisecond, "17.2s"}, {6 * time.Minute, "6m0s"}, {1500*time.Millisecond + 1, "1.501s"},
	} {
		if got := formatReset(c.d); got != c.want {
			t.Errorf("formatReset(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}

// TestOpenAISignalsUpstreamAndStage1: an upstream's own x-ratelimit-*
// headers of a family the gateway reports are replaced by the gateway's
// (one value each), those of another family pass; a stage 1 denial on a
// route with a cost block is a tokens denial in the envelope.
func TestOpenAISignalsUpstreamAndStage1(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Ratelimit-Limit-Tokens", "999")
		w.Header().Set("X-Ratelimit-Remaining-Tokens", "998")
		w.Header().Set("X-Ratelimit-Limit-Requests", "77")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"usage":{"total_tokens":50}}`))
	}))
	t.Cleanup(up.Close)
	f := newFixture(t, strings.ReplaceAll(`
server: {listen: 127.0.0.1:0, admin_listen: 127.0.0.1:0}
identity:
  api_keys:
    - {key_sha256: FREEHASH, tenant: acme, tier: free}
tiers: {free: {local: {rate: 100, per: 1s, burst: 500}}}
policies:
  tpm: {limits: {"*": {rate: 100, per: 1s, burst: 3000}}}
upstreams:
  llm: {url: OWNUPSTREAM}
routes:
  - name: chat
    method: POST
    path: /v1/chat/completions
    upstream: llm
    client_signals: openai
    policies: [tpm]
    cost: {reserve: 100, reserve_from: {json: max_tokens}, max: 500, settle_from: {json: usage.total_tokens}}
`, "OWNUPSTREAM", up.URL))
	w := chat(f, "/v1/chat/completions", 500)
	if w.Code != http.StatusOK {
		t.Fatalf("first: %d %s", w.Code, w.Body.String())
	}
	if got := w.Header().Values("X-Ratelimit-Limit-Tokens"); len(got) != 1 || got[0] != "3000" {
		t.Errorf("x-ratelimit-limit-tokens %q, want the gateway's 3000 only", got)
	}
	if got := w.Header().Values("X-Ratelimit-Remaining-Tokens"); len(got) != 1 || got[0] != "2500" {
		t.Errorf("x-ratelimit-remaining-tokens %q, want the gateway's 2500 only", got)
	}
	if got := w.Header().Values("X-Ratelimit-Limit-Requests"); len(got) != 1 || got[0] != "77" {
		t.Errorf("x-ratelimit-limit-requests %q: the route has no request policy, the upstream's passes", got)
	}
	// Stage 1 (burst 500) is empty: its denial is the route's tokens.
	w = chat(f, "/v1/chat/completions", 500)
	e := openAIBody(t, w, http.StatusTooManyRequests)
	if e.Type != "tokens" || e.Code != "rate_limit_exceeded" || !strings.Contains(e.Message, "policy local") {
		t.Errorf("stage 1 denial %+v", e)
	}
	if got := w.Header().Get("retry-after-ms"); got == "" || got == "0" {
		t.Errorf("stage 1 denial: retry-after-ms %q", got)
	}
	if got := w.Header().Get("X-Ratelimit-Limit-Tokens"); got != "500" {
		t.Errorf("stage 1 denial: x-ratelimit-limit-tokens %q, want stage 1's 500", got)
	}
}
