package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/internal/redistest"
)

// openAISDK returns node and the directory holding node_modules/openai
// (QUOTAGATE_NPM_DIR, else ${XDG_CACHE_HOME:-$HOME/.cache}/quotagate-npm,
// where scripts/test.sh installs it). Without them the test is skipped, or
// fails under CI=true.
func openAISDK(t *testing.T) (node, dir string) {
	t.Helper()
	dir = os.Getenv("QUOTAGATE_NPM_DIR")
	if dir == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache")
		}
		dir = filepath.Join(cache, "quotagate-npm")
	}
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json"))
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("node and the openai npm package (in %s) are required under CI=true (scripts/test.sh installs them): %v", dir, err)
		}
		t.Skipf("node or the openai npm package (in %s) missing: %v", dir, err)
	}
	return node, dir
}

// llmUpstream is an OpenAI-compatible chat completions upstream: it
// answers every request with a completion whose usage is max_tokens in
// all (10 prompt tokens, the rest completion), as one JSON body or, with
// stream: true, as server-sent chunks ending in a usage chunk when
// stream_options.include_usage asks for it.
func llmUpstream(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model         string `json:"model"`
			MaxTokens     int    `json:"max_tokens"`
			Stream        bool   `json:"stream"`
			StreamOptions struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		usage := map[string]int{"prompt_tokens": 10, "completion_tokens": req.MaxTokens - 10, "total_tokens": req.MaxTokens}
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{
				"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": req.Model,
				"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
					"message": map[string]any{"role": "assistant", "content": "hello back"}}},
				"usage": usage})
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := func(v map[string]any) {
			v["id"], v["object"], v["created"], v["model"] = "chatcmpl-2", "chat.completion.chunk", 1, req.Model
			b, _ := json.Marshal(v)
			fmt.Fprintf(w, "data: %s\n\n", b)
			w.(http.Flusher).Flush()
		}
		for _, part := range []string{"hello", " back"} {
			chunk(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": part}}}})
		}
		if req.StreamOptions.IncludeUsage {
			chunk(map[string]any{"choices": []any{}, "usage": usage})
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv
}

// exchange is one request through the recording proxy, as the client's
// side of the gateway saw it.
type exchange struct {
	path         string
	sent, answer time.Time // the request arrived; the gateway's answer came back
	status       int
	retryAfterMS int64 // the answer's retry-after-ms; -1 when absent
}

// recorder is a reverse proxy in front of the gateway that notes every
// exchange, so that the SDK's retry timing is measured outside the SDK.
type recorder struct {
	mu  sync.Mutex
	log []exchange
	srv *httptest.Server
}

func newRecorder(t *testing.T, target string) *recorder {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	rp := httputil.NewSingleHostReverseProxy(u)
	type sentKey struct{}
	rp.ModifyResponse = func(resp *http.Response) error {
		ms := int64(-1)
		if v := resp.Header.Get("retry-after-ms"); v != "" {
			ms, _ = strconv.ParseInt(v, 10, 64)
		}
		rec.mu.Lock()
		rec.log = append(rec.log, exchange{path: resp.Request.URL.Path, sent: resp.Request.Context().Value(sentKey{}).(time.Time),
			answer: time.Now(), status: resp.StatusCode, retryAfterMS: ms})
		rec.mu.Unlock()
		return nil
	}
	rec.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sentKey{}, time.Now())))
	}))
	t.Cleanup(rec.srv.Close)
	return rec
}

func (r *recorder) exchanges() []exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]exchange(nil), r.log...)
}

// sdkStep is one line of testdata/openai_sdk.mjs's output.
type sdkStep struct {
	Step         string         `json:"step"`
	OK           bool           `json:"ok"`
	Name         string         `json:"name"`
	Status       int            `json:"status"`
	Code         string         `json:"code"`
	Type         string         `json:"type"`
	Message      string         `json:"message"`
	RetryAfterMS string         `json:"retryAfterMs"`
	ShouldRetry  string         `json:"shouldRetry"`
	Content      string         `json:"content"`
	Usage        map[string]int `json:"usage"`
	ElapsedMS    int64          `json:"elapsedMs"`
	// The x-ratelimit-*-tokens headers of a successful response.
	LimitTokens     string `json:"limitTokens"`
	RemainingTokens string `json:"remainingTokens"`
	ResetTokens     string `json:"resetTokens"`
}

// refillTime is how long the chat route's token policy takes to refill
// from empty: what the SDK's denied requests (1000 tokens) wait at most.
const refillTime = 5 * time.Second

// sdkConfig is a gateway for the SDK: a chat route whose token policy
// (a bucket of 1000 refilling 200 a second) is reserved from max_tokens and
// settled from the usage, and a "daily" route whose policy refills 1000 an
// hour, both with client_signals: openai.
func sdkConfig(upstreamURL string, redisAddrs ...string) *gwConfig {
	cfg := limiterConfig(upstreamURL, redisAddrs, "sdk")
	cfg.Policies["tpm"] = policyCfg{Limits: map[string]limitCfg{"std": bucket(200, "1s", 1000)}}
	cfg.Policies["tpd"] = policyCfg{Limits: map[string]limitCfg{"std": bucket(1000, "1h", 1000)}}
	cost := map[string]any{"reserve": 100, "max": 1000, "reserve_from": map[string]any{"json": "max_tokens"},
		"settle_from": map[string]any{"json": "usage.total_tokens", "sse": "usage.total_tokens"}}
	cfg.Routes = append(cfg.Routes,
		routeCfg{Name: "chat", Method: "POST", Path: "/v1/chat/completions", Upstream: "up", Cost: cost, Policies: []any{"tpm"}, ClientSignals: "openai"},
		routeCfg{Name: "daily", Method: "POST", Path: "/daily/v1/chat/completions", Upstream: "up", Cost: cost, Policies: []any{"tpd"}, ClientSignals: "openai"})
	return cfg
}

// TestOpenAISDK drives the Node openai SDK through a real gateway (memory
// store, Redis and a 3-primary Cluster) to an OpenAI-compatible upstream. Expectation: on a
// 429 the SDK reads code rate_limit_exceeded, type "tokens" and the
// gateway's message; asked to retry, it waits the retry-after-ms it was
// told (measured at a proxy in front of the gateway: the retry leaves no
// earlier) and the retry is admitted, streaming with usage; a 400 reads
// as invalid_request_error; a wait past the SDK's minute says
// x-should-retry: false and the SDK does not retry.
func TestOpenAISDK(t *testing.T) {
	node, dir := openAISDK(t)
	for _, store := range []string{"memory", "redis", "cluster"} {
		t.Run(store, func(t *testing.T) {
			up := llmUpstream(t)
			var addrs []string
			switch store {
			case "redis":
				addrs = []string{redistest.StartStandalone(t).Addr}
			case "cluster":
				addrs = redistest.StartCluster(t, 3).Addrs()
			}
			gw := startGateway(t, "gw", sdkConfig(up.URL, addrs...))
			rec := newRecorder(t, gw.URL)
			steps := runSDK(t, node, dir, rec.srv.URL, "key-sdk")
			if log := rec.exchanges(); len(log) >= 2 && log[1].sent.Sub(log[0].answer) > refillTime-500*time.Millisecond {
				t.Fatalf("missed deadline: the second request came %v after the first, near the %v the bucket takes to refill",
					log[1].sent.Sub(log[0].answer), refillTime)
			}
			checkSDKSteps(t, steps)
			checkRetryTiming(t, rec.exchanges())
		})
	}
}

// runNode runs the script testdata/name with node (QG_SDK set to the
// openai package's directory dir, and env) and returns its standard
// output; a failure ends the test with both outputs. It gives the script
// 90 s.
func runNode(t *testing.T, node, dir, name string, env ...string) []byte {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Env = append(append(os.Environ(), "QG_SDK="+dir), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v\nstdout:\n%s\nstderr:\n%s", script, err, out, stderr.String())
	}
	return out
}

// startYAMLGateway starts the gateway binary on the configuration cfg
// (YAML), its listeners moved to port 0 and its store to store: "memory"
// as written, or "redis" or "cluster" (3 primaries) on a redis-server of
// the test's; it returns once the gateway is ready.
func startYAMLGateway(t *testing.T, cfg, store string) *proctest.Proc {
	t.Helper()
	cfgPath := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"QUOTAGATE_SERVER_LISTEN=127.0.0.1:0", "QUOTAGATE_SERVER_ADMIN_LISTEN=127.0.0.1:0"}
	switch store {
	case "redis":
		env = append(env, "QUOTAGATE_STORE_KIND=redis", "QUOTAGATE_STORE_REDIS_ADDRS="+redistest.StartStandalone(t).Addr)
	case "cluster":
		env = append(env, "QUOTAGATE_STORE_KIND=redis", "QUOTAGATE_STORE_REDIS_ADDRS="+strings.Join(redistest.StartCluster(t, 3).Addrs(), ","))
	}
	p := proctest.Start(t, proctest.Binary(t), proctest.Options{Name: "gw",
		Args: []string{"-config", cfgPath, "-watch-interval", "0"}, Env: proctest.Environ(env...)})
	p.WaitReady(0)
	return p
}

func runSDK(t *testing.T, node, dir, base, key string) map[string]sdkStep {
	t.Helper()
	out := runNode(t, node, dir, "openai_sdk.mjs", "QG_BASE="+base, "QG_KEY="+key)
	steps := map[string]sdkStep{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var s sdkStep
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("script output %q: %v", sc.Text(), err)
		}
		steps[s.Step] = s
		t.Logf("sdk %s", sc.Text())
	}
	return steps
}

func checkSDKSteps(t *testing.T, steps map[string]sdkStep) {
	t.Helper()
	if s := steps["fill"]; !s.OK || s.Content != "hello back" || s.Usage["total_tokens"] != 1000 {
		t.Errorf("fill: %+v, want the completion with 1000 tokens of usage", s)
	}
	// 1000 tokens taken from a bucket of 1000 refilling 200 a second.
	if s := steps["fill"]; s.LimitTokens != "1000" || s.RemainingTokens != "0" || s.ResetTokens != "5s" {
		t.Errorf("fill: x-ratelimit-*-tokens %q %q %q, want 1000, 0, 5s", s.LimitTokens, s.RemainingTokens, s.ResetTokens)
	}
	s := steps["denied"]
	if s.OK || s.Name != "RateLimitError" || s.Status != 429 || s.Code != "rate_limit_exceeded" || s.Type != "tokens" {
		t.Errorf("denied: %+v, want a RateLimitError with code rate_limit_exceeded and type tokens", s)
	}
	if !strings.HasPrefix(s.Message, "429 Rate limit reached for policy tpm on tokens") || !strings.Contains(s.Message, "requested 1000") {
		t.Errorf("denied: message %q, want the gateway's", s.Message)
	}
	// 1000 tokens at 200 a second, less the time since the bucket emptied.
	if ms, err := strconv.Atoi(s.RetryAfterMS); err != nil || ms <= 0 || ms > int(refillTime.Milliseconds()) {
		t.Errorf("denied: retry-after-ms %q, want in (0, %d]", s.RetryAfterMS, refillTime.Milliseconds())
	}
	if s := steps["retried"]; !s.OK || s.Content != "hello back" || s.Usage["total_tokens"] != 1000 {
		t.Errorf("retried: %+v, want the streamed completion with its usage chunk", s)
	}
	if s := steps["bad"]; s.OK || s.Name != "BadRequestError" || s.Type != "invalid_request_error" || s.Code != "bad_request" || !strings.Contains(s.Message, "5000") {
		t.Errorf("bad: %+v, want a BadRequestError of type invalid_request_error", s)
	}
	if s := steps["daily-fill"]; !s.OK {
		t.Errorf("daily-fill: %+v", s)
	}
	if s := steps["daily-denied"]; s.OK || s.Status != 429 || s.ShouldRetry != "false" || s.Code != "rate_limit_exceeded" {
		t.Errorf("daily-denied: %+v, want a 429 with x-should-retry false", s)
	}
}

// checkRetryTiming checks, from the exchanges the proxy saw, that the SDK
// retried the streamed request no earlier than retry-after-ms after the
// 429, that the retry was admitted, and that the daily denial was not
// retried. A retry late by more than retrySlack is a missed deadline (a
// busy machine), reported apart from a wrong answer.
func checkRetryTiming(t *testing.T, log []exchange) {
	t.Helper()
	const retrySlack = 2 * time.Second
	var chat, daily []exchange
	for _, e := range log {
		switch e.path {
		case "/v1/chat/completions":
			chat = append(chat, e)
		case "/daily/v1/chat/completions":
			daily = append(daily, e)
		}
	}
	// fill 200, denied 429, retried 429 then 200, bad 400.
	want := []int{200, 429, 429, 200, 400}
	if len(chat) != len(want) {
		t.Fatalf("chat exchanges %+v, want statuses %v", chat, want)
	}
	for i, e := range chat {
		if e.status != want[i] {
			t.Fatalf("chat exchange %d: status %d, want %d (all: %+v)", i, e.status, want[i], chat)
		}
	}
	denial, retry := chat[2], chat[3]
	told := time.Duration(denial.retryAfterMS) * time.Millisecond
	waited := retry.sent.Sub(denial.answer)
	t.Logf("told retry-after-ms %d; the SDK came back %v after the 429", denial.retryAfterMS, waited.Round(time.Millisecond))
	// Node's timers may fire up to a millisecond early.
	if denial.retryAfterMS <= 0 || waited < told-2*time.Millisecond {
		t.Errorf("wrong answer: the SDK retried %v after a 429 that said retry-after-ms %d", waited, denial.retryAfterMS)
	}
	if waited > told+retrySlack {
		t.Errorf("missed deadline: the SDK retried %v after the 429, told %v (slack %v)", waited, told, retrySlack)
	}
	if len(daily) != 2 || daily[0].status != 200 || daily[1].status != 429 {
		t.Errorf("daily exchanges %+v, want 200 then one 429, not retried", daily)
	}
}
