package gateway

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/internal/headername"
	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit/lease"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/stack"

	dto "github.com/prometheus/client_model/go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// counterValue is the value of the series of counter family name whose
// labels include want (0 when there is none).
func counterValue(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		return m.GetCounter().GetValue()
	}
	return 0
}

// settleConfig reserves tokens on POST /v1/chat/{mode} (100 by default,
// max_tokens or X-Max-Tokens up to 500) and settles the tokens policy
// from the response; requests keeps its reservation. /dead reaches no
// upstream. POST /v1/window/{mode} does the same with a fixed window of
// 10 s; POST /v1/gone/{mode} as chat, but a usage the caller keeps from
// being reported takes max (on_missing_usage). Request bodies are limited to 2 MiB, of which 1 MiB (the default
// max_body) is read for max_tokens. Each key KEYn is its own tenant tn.
// Both token buckets refill slowly: Redis expires a bucket's key once it
// would be full in real time, and a check that a loaded machine delays
// past that would find a full bucket (requests refilled 300 units in
// 300 ms when it took 1000 a second).
const settleConfig = `
server: {listen: 127.0.0.1:0, admin_listen: 127.0.0.1:0, max_body_bytes: 2097152}` + settleHead + `
  tokens:   {limits: {"*": {rate: 1000, per: 1000s, burst: 1000}}}
  requests: {limits: {"*": {rate: 10000, per: 1000s, burst: 10000}}}
  window:   {algorithm: fixed_window, limits: {"*": {rate: 1000, per: 10s}}}
upstreams:
  llm:  {url: UPSTREAM}
  dead: {url: DEAD}
  slow: {url: UPSTREAM, timeout: 200ms}
routes:
  - name: chat
    method: POST
    path: /v1/chat/{mode}
    upstream: llm
    policies: [tokens, requests]
    cost:
      reserve: 100
      reserve_from: {json: max_tokens, json_aliases: [max_completion_tokens], json_count: n, header: X-Max-Tokens}
      max: 500
      settle_from: {header: X-Usage, json: usage.total_tokens, sse: usage.total_tokens}
      settle_policies: [tokens]
  - name: window
    method: POST
    path: /v1/window/{mode}
    upstream: llm
    policies: [window]
    cost: {reserve: 100, reserve_from: {json: max_tokens}, max: 500, settle_from: {header: X-Usage}}
  - name: dead
    method: POST
    path: /dead
    upstream: dead
    policies: [tokens, requests]
    cost: {reserve: 100, settle_from: {header: X-Usage}}
  - name: slow
    method: POST
    path: /v1/slow
    upstream: slow
    policies: [tokens]
    cost: {reserve: 100, reserve_from: {json: max_tokens}, max: 500, settle_from: {header: X-Usage}}
  - name: gone
    method: POST
    path: /v1/gone/{mode}
    upstream: llm
    policies: [tokens]
    cost: {reserve: 100, reserve_from: {json: max_tokens}, max: 500, on_missing_usage: max,
           settle_from: {json: usage.total_tokens, sse: usage.total_tokens}}
`

// settleHead is the store, the callers and the tier of the settle tests
// configurations (see newSettleFixtureWith), policies to follow.
const settleHead = `
store: {kind: redis, redis: {addrs: [REDIS], timeout: TIMEOUT}}
identity:
  api_keys:
KEYS
tiers: {t: {}}
policies:`

// settleFixture is a gateway on a real Redis (on the fixture's clock),
// served on a real listener, in front of an upstream that reports usage.
type settleFixture struct {
	*fixture
	obs     *observed // its metrics and spans
	srv     *redistest.Server
	front   *httptest.Server
	release chan struct{}    // lets /v1/chat/sse-gated finish its stream
	arrived chan struct{}    // has a value once a stall request reached the upstream
	held    *holdingUpstream // the gates of mode held (no server of its own)
}

func newSettleFixture(t *testing.T) *settleFixture {
	t.Helper()
	// A store timeout no loaded machine reaches: a decision that missed
	// it would fail open and show as a wrong answer.
	return newSettleFixtureTimeout(t, time.Second)
}

// newSettleFixtureTimeout is newSettleFixture with the store's timeout set
// to timeout, for a test that waits for calls to time out.
func newSettleFixtureTimeout(t *testing.T, timeout time.Duration) *settleFixture {
	t.Helper()
	srv := redistest.StartStandalone(t)
	return newSettleFixtureWith(t, srv, []string{srv.Addr}, settleConfig, timeout)
}

// newSettleFixtureWith is newSettleFixture with the configuration text
// (its REDIS, UPSTREAM, DEAD, KEYS and TIMEOUT replaced) on the Redis
// servers at addrs (srv, when not nil, is the one a header-pause mode
// pauses), or on the memory store when addrs is empty.
func newSettleFixtureWith(t testing.TB, srv *redistest.Server, addrs []string, text string, timeout time.Duration) *settleFixture {
	t.Helper()
	sf := &settleFixture{srv: srv, release: make(chan struct{}), arrived: make(chan struct{}, 1),
		held: &holdingUpstream{arrived: make(chan string, 32), gates: map[string]chan struct{}{}}}
	up := httptest.NewServer(http.HandlerFunc(sf.upstream))
	t.Cleanup(up.Close)
	var keys strings.Builder
	for i := 1; i <= 25; i++ {
		fmt.Fprintf(&keys, "    - {key_sha256: %s, tenant: t%d, tier: t}\n", sha256Hex("KEY"+strconv.Itoa(i)), i)
	}
	if len(addrs) == 0 {
		text = strings.Replace(text, "kind: redis", "kind: memory", 1)
	}
	text = strings.NewReplacer("REDIS", strings.Join(addrs, ", "), "UPSTREAM", up.URL, "DEAD", deadURL(t), "KEYS\n", keys.String(), "TIMEOUT", timeout.String()).Replace(text)
	f := &fixture{clock: newTestClock(), path: writeConfig(t, text), upstream: newUpstream(t)} // the recorder only answers quota checks
	cfg, err := config.Load(f.path, testGetenv)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store.Redis.KeyPrefix = "st" + strconv.FormatInt(time.Now().UnixNano(), 36)
	exp := tracetest.NewInMemoryExporter()
	tel, m := newTestMetrics(t)
	sf.obs = &observed{fixture: f, spans: exp, metrics: tel.Metrics}
	opts := Options{Now: f.clock.Now, Metrics: m, TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))}
	if len(addrs) > 0 {
		opts.OpenStore = func(c config.Store) (*stack.Stack, error) {
			r := c.Redis
			client := redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: r.Addrs, ReadTimeout: r.Timeout, WriteTimeout: r.Timeout})
			store := redisstore.NewRedisStore(client, redisstore.RedisOptions{Timeout: r.Timeout, Now: f.clock.Now})
			br := stack.NewBreaker(lease.New(store, lease.Options{Now: f.clock.Now}), stack.BreakerOptions{})
			return stack.New(br, stack.Options{Breaker: br, Slots: store, Now: f.clock.Now}), nil // slots freed as redisstore.Open frees them
		}
	}
	gw, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	f.gw = gw
	sf.fixture = f
	sf.front = httptest.NewServer(gw)
	t.Cleanup(sf.front.Close)
	return sf
}

// upstream answers /v1/chat/{mode}, /v1/window/{mode} and /v1/gone/{mode}
// with the usage ?u= in the place mode names: header (header-pause
// freezes Redis first), json, sse, sse-gated (the usage event only once
// release is closed), sse-cut (a running usage, then nothing until the
// caller leaves), trailers (the request's trailers echoed in
// X-Seen-Trailer), missing (a JSON body without it), hangup (no answer:
// the connection closes after the request was read), stall (no answer
// until the caller leaves), held (the JSON answer once the test opens
// sf.held's gate ?g=, which reports its arrival), or cross (see
// crossWindow).
func (sf *settleFixture) upstream(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	u := r.URL.Query().Get("u")
	mode := r.URL.Path
	for _, prefix := range []string{"/v1/chat/", "/v1/window/", "/v1/gone/"} {
		mode = strings.TrimPrefix(mode, prefix)
	}
	switch mode {
	case "llm": // an OpenAI-style usage of ?p= prompt (?k= of them cached) and ?c= completion tokens
		w.Header().Set("Content-Type", "application/json")
		details := ""
		if k := r.URL.Query().Get("k"); k != "" {
			details = `,"prompt_tokens_details":{"cached_tokens":` + k + `}`
		}
		fmt.Fprintf(w, `{"id":"c1","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":%s,"completion_tokens":%s%s}}`,
			r.URL.Query().Get("p"), r.URL.Query().Get("c"), details)
	case "llm-sse": // the same, streamed, the usage in the last chunk (include_usage)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n")
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%s,\"completion_tokens\":%s}}\n\ndata: [DONE]\n\n",
			r.URL.Query().Get("p"), r.URL.Query().Get("c"))
	case "cross":
		sf.crossWindow(w, r, u)
	case "header-pause": // Redis freezes before the settlement
		sf.srv.Pause()
		fallthrough
	case "header":
		w.Header().Set("X-Usage", u)
		_, _ = io.WriteString(w, "ok")
	case "json":
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(cgiHeader(r.Header, "accept-encoding"), "gzip") { // as a real upstream would
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			fmt.Fprintf(zw, `{"usage":{"total_tokens":%s}}`, u)
			_ = zw.Close()
			return
		}
		fmt.Fprintf(w, `{"id":"c1","choices":[{"text":"hi"}],"usage":{"prompt_tokens":1,"total_tokens":%s}}`, u)
	case "sse", "sse-gated":
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":\"hel\"}]}\n\n")
		w.(http.Flusher).Flush()
		if strings.HasSuffix(r.URL.Path, "gated") {
			<-sf.release
		}
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"total_tokens\":%s}}\n\ndata: [DONE]\n\n", u)
	case "sse-cut": // reports a running usage, then streams until the caller leaves
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"total_tokens\":%s}}\n\n", u)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	case "/v1/slow": // works on until the gateway gives up on it
		<-r.Context().Done()
	case "trailers": // says which request trailers arrived, with their values
		for name, vs := range r.Trailer {
			w.Header().Add("X-Seen-Trailer", name+"="+strings.Join(vs, ","))
		}
		w.Header().Set("X-Usage", u)
	case "held":
		id := r.URL.Query().Get("g")
		sf.held.arrived <- id
		select {
		case <-sf.held.gate(id):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c1","usage":{"total_tokens":%s}}`, u)
	case "stall": // works on, without an answer, until the caller leaves
		sf.arrived <- struct{}{}
		<-r.Context().Done()
	case "hangup": // had the whole request (read above), then closes without an answer
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	case "missing":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c1","error":"model overloaded"}`)
	default:
		http.NotFound(w, r)
	}
}

// cgiHeader returns the values of the header lower (lowercase, with "-")
// as a CGI, WSGI or Rack upstream reads them: one variable for every
// spelling that differs only in case or in "_" for "-", values joined.
func cgiHeader(h http.Header, lower string) string {
	var vs []string
	for k, v := range h {
		if headername.Equal(k, lower) {
			vs = append(vs, v...)
		}
	}
	return strings.Join(vs, ",")
}

// crossWindow serves mode cross: the clock moves 2 ms on (into the
// next 10 s window when the request came 1 ms before its end), the same
// caller's request of max_tokens 100 that uses exactly 100 is served in
// the new window (the caller's API key is ?key=), and then the response
// reports the usage u.
func (sf *settleFixture) crossWindow(w http.ResponseWriter, r *http.Request, u string) {
	sf.clock.Add(2 * time.Millisecond)
	req, _ := http.NewRequest("POST", sf.front.URL+"/v1/window/header?u=100", strings.NewReader(`{"max_tokens":100}`))
	req.Header.Set("X-API-Key", r.URL.Query().Get("key")) // the gateway does not forward the caller's
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		http.Error(w, fmt.Sprintf("request in the next window: %v %v", resp, err), http.StatusBadGateway)
		return
	}
	resp.Body.Close()
	w.Header().Set("X-Usage", u)
	_, _ = io.WriteString(w, "ok")
}

// post sends a chat request of tenant n with body (JSON) through the
// listener and returns the response with its body read, after every
// settlement it started has been applied.
func (sf *settleFixture) post(t *testing.T, n int, path, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	return sf.postBody(t, n, path, strings.NewReader(body), hdr)
}

// postBody is post with a body of any kind (http.NoBody for none).
func (sf *settleFixture) postBody(t *testing.T, n int, path string, body io.Reader, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", sf.front.URL+path, body)
	req.Header.Set("X-API-Key", "KEY"+strconv.Itoa(n))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return sf.send(t, req)
}

// send sends req to the gateway and returns its response and body once
// its settlement is done. A body that breaks off fails the test: its
// settlement is then not the one the test wants to see.
func (sf *settleFixture) send(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("%s %s: status %d, body broke off after %q: %v", req.Method, req.URL.Path, resp.StatusCode, b, err)
	}
	sf.gw.settling.Wait()
	return resp, string(b)
}

// remaining reads tenant n's remaining units per policy from the quota
// endpoint.
func (sf *settleFixture) remaining(t *testing.T, n int) map[string]int64 {
	t.Helper()
	_, byName := sf.quota(t, map[string]string{"X-API-Key": "KEY" + strconv.Itoa(n)})
	out := map[string]int64{}
	for _, q := range byName {
		out[q.Name] = q.Remaining
	}
	return out
}

// rateLimitRemaining returns the r= of the RateLimit header.
func rateLimitRemaining(t *testing.T, h http.Header) int64 {
	t.Helper()
	v := h.Get("RateLimit")
	i := strings.Index(v, ";r=")
	if i < 0 {
		t.Fatalf("RateLimit = %q, want a remaining", v)
	}
	rest := v[i+3:]
	if j := strings.IndexByte(rest, ';'); j >= 0 {
		rest = rest[:j]
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	if err != nil {
		t.Fatalf("RateLimit = %q: %v", v, err)
	}
	return n
}

// TestSettleFromResponses drives a real Redis through the gateway: a
// response that reports less usage than reserved refunds exactly the
// difference (from a header, a JSON body, an SSE stream), one that
// reports more charges it into debt and the next request waits exactly
// until it is repaid, a response without usage leaves the reservation,
// and an upstream that never answers gives it all back.
func TestSettleFromResponses(t *testing.T) {
	sf := newSettleFixture(t)
	for i, mode := range []string{"header", "json", "sse"} {
		t.Run("refund_from_"+mode, func(t *testing.T) {
			n := i + 1
			resp, body := sf.post(t, n, "/v1/chat/"+mode+"?u=120", `{"model":"m","max_tokens":300}`, nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			// The headers describe the state after the reservation of 300.
			if got := rateLimitRemaining(t, resp.Header); got != 700 {
				t.Errorf("RateLimit remaining = %d, want 700 (1000 - 300 reserved)", got)
			}
			got := sf.remaining(t, n)
			if got["tokens"] != 880 || got["requests"] != 9700 {
				t.Errorf("after using 120 of 300: remaining %v, want tokens 880 (refunded 180), requests 9700 (not settled)", got)
			}
		})
	}

	t.Run("charge_into_debt", func(t *testing.T) {
		resp, body := sf.post(t, 4, "/v1/chat/header?u=1500", `{"max_tokens":100}`, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		_, byName := sf.quota(t, map[string]string{"X-API-Key": "KEY4"})
		if q := byName["tokens/"]; q.Remaining != 0 || q.Debt != 500 || q.ResetMS != 1_500_000 {
			t.Errorf("in debt: /_quota says %+v, want remaining 0, debt 500, reset in 1500 s", q)
		}
		// 1000 - 100 reserved - 1400 charged = -500; the next 100 need 600
		// tokens at one a second (Retry-After adds a jitter to that).
		resp, body = sf.post(t, 4, "/v1/chat/header?u=1", `{"max_tokens":100}`, nil)
		ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		if resp.StatusCode != http.StatusTooManyRequests || ra < 600 || !strings.Contains(body, `"retry_after_ms":600000,`) {
			t.Fatalf("next request: %d, Retry-After %q, body %s; want 429 after exactly 600 s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
		sf.clock.Add(600*time.Second - time.Millisecond)
		if resp, _ := sf.post(t, 4, "/v1/chat/header?u=100", `{"max_tokens":100}`, nil); resp.StatusCode != http.StatusTooManyRequests {
			t.Errorf("1 ms before the debt is repaid: %d, want 429", resp.StatusCode)
		}
		sf.clock.Add(time.Millisecond)
		if resp, body := sf.post(t, 4, "/v1/chat/header?u=100", `{"max_tokens":100}`, nil); resp.StatusCode != http.StatusOK {
			t.Errorf("once repaid: %d %s, want 200", resp.StatusCode, body)
		}
	})

	t.Run("missing_usage_keeps_reservation", func(t *testing.T) {
		sf.post(t, 5, "/v1/chat/missing", `{"max_tokens":250}`, nil)
		if got := sf.remaining(t, 5)["tokens"]; got != 750 {
			t.Errorf("no usage reported: remaining %d, want 750 (the reservation stands)", got)
		}
	})

	t.Run("upstream_failure_refunds", func(t *testing.T) {
		resp, _ := sf.post(t, 6, "/dead", `{}`, nil)
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("dead upstream: %d, want 502", resp.StatusCode)
		}
		if got := sf.remaining(t, 6); got["tokens"] != 1000 || got["requests"] != 10000 {
			t.Errorf("after a 502: remaining %v, want everything back", got)
		}
	})

	t.Run("counted", func(t *testing.T) {
		// tokens: three refunds of 180, the charge of 1400, the request
		// that used exactly its 100, the missing usage, and the 502's
		// refund of 100 (which requests, settled there, shares).
		fams := sf.obs.scrape(t)
		want := map[string]float64{
			"tokens/refund": 4, "tokens/charge": 1, "tokens/exact": 1, "tokens/missing": 1,
			"requests/refund": 1, "requests/charge": 0, "requests/exact": 0, "requests/missing": 0,
		}
		for k, v := range want {
			policy, result, _ := strings.Cut(k, "/")
			if got := counterValue(fams, "quotagate_settlements_total", map[string]string{"policy": policy, "result": result}); got != v {
				t.Errorf("quotagate_settlements_total{policy=%s,result=%s} = %v, want %v", policy, result, got, v)
			}
		}
		for k, v := range map[string]float64{"tokens/refund": 640, "tokens/charge": 1400, "requests/refund": 100, "requests/charge": 0} {
			policy, dir, _ := strings.Cut(k, "/")
			if got := counterValue(fams, "quotagate_settled_units_total", map[string]string{"policy": policy, "direction": dir}); got != v {
				t.Errorf("quotagate_settled_units_total{policy=%s,direction=%s} = %v, want %v", policy, dir, got, v)
			}
		}
		var charged bool
		for _, s := range sf.obs.spans.GetSpans() {
			a := spanAttrs(s)
			if a["quotagate.settlement"].AsString() == "charge" {
				charged = a["quotagate.reserved_units"].AsInt64() == 100 && a["quotagate.settled_units"].AsInt64() == 1500
			}
		}
		if !charged {
			t.Error("no request span carries the charge with reserved_units 100 and settled_units 1500")
		}
	})

	t.Run("reservation_bounds", func(t *testing.T) {
		resp, body := sf.post(t, 7, "/v1/chat/header?u=1", `{"max_tokens":501}`, nil)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "at most 500") {
			t.Errorf("above max: %d %s, want 400 naming the max", resp.StatusCode, body)
		}
		resp, body = sf.post(t, 7, "/v1/chat/header?u=1", ``, map[string]string{"X-Max-Tokens": "-3"})
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "bad_request") {
			t.Errorf("malformed: %d %s, want 400", resp.StatusCode, body)
		}
		if got := sf.remaining(t, 7)["tokens"]; got != 1000 {
			t.Errorf("refused requests took %d tokens", 1000-got)
		}
	})
}

// TestSettleStreamsBeforeSettling: the first event of an SSE stream
// reaches the client while the upstream is still streaming, and the usage
// of its last event is settled once it ends.
func TestSettleStreamsBeforeSettling(t *testing.T) {
	sf := newSettleFixture(t)
	req, _ := http.NewRequest("POST", sf.front.URL+"/v1/chat/sse-gated?u=40", strings.NewReader(`{"max_tokens":200}`))
	req.Header.Set("X-API-Key", "KEY1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.Contains(line, "hel") {
		t.Fatalf("first event: %q, %v", line, err)
	}
	close(sf.release) // only now may the upstream finish
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	sf.gw.settling.Wait()
	if got := sf.remaining(t, 1)["tokens"]; got != 960 {
		t.Errorf("after a stream that used 40 of 200: remaining %d, want 960", got)
	}
}

// TestSettleRetriedOnceApplied: a settlement whose call times out (Redis
// frozen) is retried with the same id; when Redis comes back both calls
// run, and the refund is applied exactly once.
func TestSettleRetriedOnceApplied(t *testing.T) {
	sf := newSettleFixtureTimeout(t, 250*time.Millisecond)
	if resp, _ := sf.post(t, 1, "/v1/chat/header?u=500", `{}`, nil); resp.StatusCode != http.StatusOK { // warm the pool
		t.Fatalf("warm-up: %d", resp.StatusCode)
	}
	calls := func() int64 { // script calls: FCALL, or EVALSHA where functions are refused
		info, _ := sf.srv.MustDo(t, "INFO", "commandstats").(string)
		var n int64
		for _, line := range strings.Split(info, "\n") {
			for _, name := range []string{"cmdstat_fcall:calls=", "cmdstat_evalsha:calls="} {
				if rest, ok := strings.CutPrefix(line, name); ok {
					c, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
					n += c
				}
			}
		}
		return n
	}
	// tenant 2: 1000 - 300 reserved; the response reports 100. Both
	// settlement calls time out (250ms each) while Redis is frozen.
	before := calls()
	resp, _ := sf.post(t, 2, "/v1/chat/header-pause?u=100", `{"max_tokens":300}`, nil)
	sf.srv.Resume()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	deadline := time.Now().Add(10 * time.Second)
	for calls() < before+2 { // both attempts have reached the script
		if time.Now().After(deadline) {
			t.Fatalf("missed deadline: Redis ran %d settlement calls in 10 s, want 2", calls()-before)
		}
		time.Sleep(10 * time.Millisecond) // Redis works on real time
	}
	if got := sf.remaining(t, 2)["tokens"]; got != 900 {
		t.Errorf("refund of 200, retried: remaining %d, want 900 (applied once)", got)
	}
}

// TestSettleBrokenOffStream: a caller that reads a stream's running usage
// and hangs up gets nothing back when that usage is below the reservation
// (the reservation stands, counted missing), and pays the excess when it
// is above: a usage read before the end may not cover the work done.
func TestSettleBrokenOffStream(t *testing.T) {
	sf := newSettleFixture(t)
	for i, c := range []struct {
		used, result string
		remaining    int64
	}{
		{used: "30", result: "missing", remaining: 800}, // 200 reserved, none back
		{used: "450", result: "charge", remaining: 550}, // 200 reserved, 250 more charged
	} {
		n := i + 1
		req, _ := http.NewRequest("POST", sf.front.URL+"/v1/chat/sse-cut?u="+c.used, strings.NewReader(`{"max_tokens":200}`))
		req.Header.Set("X-API-Key", "KEY"+strconv.Itoa(n))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || !strings.Contains(line, "total_tokens\":"+c.used) {
			t.Fatalf("usage event: %q, %v", line, err)
		}
		resp.Body.Close() // the caller hangs up mid-stream
		byResult := sf.awaitSettled(t, n)
		if byResult[c.result] != 1 {
			t.Errorf("stream cut after a usage of %s: settlements %v, want one %s", c.used, byResult, c.result)
		}
		sf.gw.settling.Wait()
		if got := sf.remaining(t, n)["tokens"]; got != c.remaining {
			t.Errorf("stream cut after a usage of %s (200 reserved): remaining %d, want %d", c.used, got, c.remaining)
		}
	}
}

// awaitSettled waits until the tokens policy has counted n settlements in
// all (after a caller hung up, the gateway settles when it notices) and
// returns them by result, once every settlement call has ended.
func (sf *settleFixture) awaitSettled(t *testing.T, n int) map[string]float64 {
	t.Helper()
	settled := func() (all float64, byResult map[string]float64) {
		fams, byResult := sf.obs.scrape(t), map[string]float64{}
		for _, r := range []string{"missing", "charge", "refund", "exact"} {
			byResult[r] = counterValue(fams, "quotagate_settlements_total", map[string]string{"policy": "tokens", "result": r})
			all += byResult[r]
		}
		return all, byResult
	}
	all, byResult := settled()
	for deadline := time.Now().Add(10 * time.Second); all < float64(n); all, byResult = settled() {
		if time.Now().After(deadline) {
			proctest.FatalOverrun(t, "%v settlements 10 s after the caller hung up, want %d", all, n)
		}
		time.Sleep(5 * time.Millisecond) // polls a condition the gateway signals no other way
	}
	sf.gw.settling.Wait()
	return byResult
}

// TestSettleMissingUsageTakesMax: on a route with on_missing_usage: max,
// a caller that keeps its usage from being reported takes the route's max
// (500), or the usage read so far when that is more, instead of keeping
// its reservation (200): hanging up mid-stream after a running usage, or
// before any response while the upstream works, or asking for a success
// response without a usage. Otherwise it would skip every charge beyond
// its reservation (the prompt's tokens). A response with a usage settles
// as usual, and an upstream's error without one keeps the reservation.
func TestSettleMissingUsageTakesMax(t *testing.T) {
	sf := newSettleFixture(t)
	hangUp := func(n int, mode string) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", sf.front.URL+"/v1/gone/"+mode, strings.NewReader(`{"max_tokens":200}`))
		req.Header.Set("X-API-Key", "KEY"+strconv.Itoa(n))
		if mode == "stall" {
			go func() { <-sf.arrived; cancel() }() // the upstream has the request
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
				t.Fatalf("stall: status %d, want the caller gone", resp.StatusCode)
			}
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || !strings.Contains(line, "total_tokens") {
			t.Fatalf("%s: usage event %q, %v", mode, line, err)
		}
		resp.Body.Close() // the caller hangs up mid-stream
	}
	for i, c := range []struct {
		mode      string
		remaining int64
	}{
		{"sse-cut?u=30", 500},  // 200 reserved, a running usage of 30: max
		{"sse-cut?u=600", 400}, // a running usage above max: the usage
		{"stall", 500},         // gone before the response: max
	} {
		n := i + 1
		hangUp(n, c.mode)
		sf.awaitSettled(t, n)
		if got := sf.remaining(t, n)["tokens"]; got != c.remaining {
			t.Errorf("%s, the caller gone after reserving 200: remaining %d, want %d", c.mode, got, c.remaining)
		}
	}
	for i, c := range []struct {
		mode      string
		status    int
		remaining int64
	}{
		{"missing", http.StatusOK, 500},       // a success without a usage: max
		{"nowhere", http.StatusNotFound, 800}, // an error without one: the reservation
		{"json?u=40", http.StatusOK, 960},     // a usage: settled
	} {
		n := i + 4
		if resp, body := sf.post(t, n, "/v1/gone/"+c.mode, `{"max_tokens":200}`, nil); resp.StatusCode != c.status {
			t.Fatalf("%s: %d %s, want %d", c.mode, resp.StatusCode, body, c.status)
		}
		if got := sf.remaining(t, n)["tokens"]; got != c.remaining {
			t.Errorf("%s, read to its end after reserving 200: remaining %d, want %d", c.mode, got, c.remaining)
		}
	}
}

// TestSettleAsksIdentityBody: a caller that asks for a compressed response
// (whose usage the gateway cannot read) to keep a small reservation whatever
// it used still has its usage settled: the gateway asks the upstream for an
// identity body on routes that settle from the body.
// Accept_Encoding is the same variable to an upstream that reads headers
// as CGI does, and is dropped too.
func TestSettleAsksIdentityBody(t *testing.T) {
	sf := newSettleFixture(t)
	for i, name := range []string{"Accept-Encoding", "Accept_encoding"} {
		n := i + 1
		req, _ := http.NewRequest("POST", sf.front.URL+"/v1/chat/json?u=450", strings.NewReader(`{"max_tokens":1}`))
		req.Header.Set("X-API-Key", "KEY"+strconv.Itoa(n))
		req.Header["Accept-Encoding"] = []string{"identity"} // else the client asks for gzip itself, and decodes it
		req.Header[name] = []string{"gzip"}
		resp, body := sf.send(t, req)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "" {
			t.Fatalf("%s: status %d, Content-Encoding %q: %s; want 200 and an identity body", name, resp.StatusCode, resp.Header.Get("Content-Encoding"), body)
		}
		if got := sf.remaining(t, n)["tokens"]; got != 550 {
			t.Errorf("reserved 1, used 450 behind %s: gzip: remaining %d, want 550 (the usage charged)", name, got)
		}
	}
}

// TestSettleRefundInReservationWindow: a reservation taken in the last
// millisecond of a fixed window and settled in the next gives nothing
// back there: the next window's count (another request's 100) stands,
// since the units reserved were never taken from it. A refund within the
// reservation's window still gives back.
func TestSettleRefundInReservationWindow(t *testing.T) {
	sf := newSettleFixture(t)
	// The fixture's clock is 5 s into a 10 s window: go to 1 ms before
	// its end.
	sf.clock.Add(5*time.Second - time.Millisecond)
	resp, body := sf.post(t, 1, "/v1/window/cross?u=30&key=KEY1", `{"max_tokens":500}`, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if got := rateLimitRemaining(t, resp.Header); got != 500 {
		t.Errorf("RateLimit remaining of the reservation = %d, want 500", got)
	}
	if got := sf.remaining(t, 1)["window"]; got != 900 {
		t.Errorf("next window after refunding 470 of the previous window's reservation: remaining %d, want 900 (only its own 100 counted)", got)
	}
	// In one window: 500 reserved, 30 used.
	sf.post(t, 2, "/v1/window/header?u=30", `{"max_tokens":500}`, nil)
	if got := sf.remaining(t, 2)["window"]; got != 970 {
		t.Errorf("refund in the reservation's window: remaining %d, want 970", got)
	}
}

// TestSettleReserveMaxWhenBodyHides: a request whose body the gateway
// cannot read max_tokens from (gzip'd, without the field, the field past
// max_body) reserves the route's max, 500, whatever its X-Max-Tokens says:
// the upstream acts on the body, so the caller must not choose a smaller
// reservation by hiding it. A request without a body may state it in the
// header. So does a body that JSON decoders read different values from
// (the field twice, the field in another case, which Go's encoding/json
// takes for it, a second JSON value after the first). The statuses stay
// as documented: such a reservation that does
// not fit is 429, a body above server.max_body_bytes 413.
func TestSettleReserveMaxWhenBodyHides(t *testing.T) {
	sf := newSettleFixture(t)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = io.WriteString(zw, `{"model":"m","max_tokens":100000}`)
	_ = zw.Close()
	send := func(n int, body io.Reader, hdr map[string]string) (*http.Response, string) {
		t.Helper()
		return sf.postBody(t, n, "/v1/chat/missing", body, hdr) // no usage: the reservation stands
	}
	long := `{"messages":"` + strings.Repeat("y", 1<<20) + `","max_tokens":1}`
	for i, c := range []struct {
		name string
		body io.Reader
		hdr  map[string]string
		want int64 // reserved
	}{
		{"gzip", bytes.NewReader(gz.Bytes()), map[string]string{"Content-Encoding": "gzip", "X-Max-Tokens": "1"}, 500},
		{"field missing", strings.NewReader(`{"model":"m"}`), map[string]string{"X-Max-Tokens": "1"}, 500},
		{"field past max_body", strings.NewReader(long), map[string]string{"X-Max-Tokens": "1"}, 500},
		{"readable", strings.NewReader(`{"max_tokens":1}`), map[string]string{"X-Max-Tokens": "300"}, 1},
		// Bodies that JSON decoders read differently: the gateway cannot
		// know which value the upstream acts on.
		{"field twice", strings.NewReader(`{"max_tokens":400,"max_tokens":1}`), nil, 500},
		{"field in another case", strings.NewReader(`{"max_tokens":1,"Max_Tokens":400}`), nil, 500},
		{"field in capitals, later", strings.NewReader(`{"max_tokens":1,"model":"m","MAX_TOKENS":400}`), nil, 500},
		{"a second value after the body's", strings.NewReader(`{"max_tokens":1}` + "\n" + `{"max_tokens":400}`), nil, 500},
		{"whitespace after the value", strings.NewReader(`{"max_tokens":2}` + " \r\n"), nil, 2},
		// max_completion_tokens is the same limit to the upstream (vLLM
		// reads it before max_tokens): the larger counts.
		{"an alias states more", strings.NewReader(`{"max_tokens":1,"max_completion_tokens":400}`), nil, 400},
		{"the alias alone", strings.NewReader(`{"max_completion_tokens":40}`), nil, 40},
		{"an alias twice", strings.NewReader(`{"max_tokens":1,"max_completion_tokens":1,"max_completion_tokens":400}`), nil, 500},
		// n completions of up to max_tokens each.
		{"n completions", strings.NewReader(`{"max_tokens":100,"n":4}`), nil, 400},
		{"no body, header", http.NoBody, map[string]string{"X-Max-Tokens": "40"}, 40},
		{"no body, nothing", http.NoBody, nil, 500},
		// The upstream reads the header it receives: one the request
		// names in Connection is removed on the way (hop-by-hop), so it
		// states nothing; one spelled with "_" is the same variable to
		// CGI, WSGI and Rack upstreams, so it states the reservation.
		{"no body, header named in Connection", http.NoBody, map[string]string{"X-Max-Tokens": "1", "Connection": "X-Max-Tokens"}, 500},
		{"no body, header spelled with underscores", http.NoBody, map[string]string{"X_Max_Tokens": "40"}, 40},
		// Without a Content-Length (chunked) the body is still read: a
		// header cannot state less than the body asks for.
		{"chunked", &pieces{s: `{"max_tokens":400}`, n: 5}, map[string]string{"X-Max-Tokens": "1"}, 400},
		{"chunked, field past max_body", &pieces{s: long, n: 64 << 10}, map[string]string{"X-Max-Tokens": "1"}, 500},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := i + 1
			resp, body := send(n, c.body, c.hdr)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if got := rateLimitRemaining(t, resp.Header); got != 1000-c.want {
				t.Errorf("RateLimit remaining %d, want %d (%d reserved)", got, 1000-c.want, c.want)
			}
			if got := sf.remaining(t, n)["tokens"]; got != 1000-c.want {
				t.Errorf("tokens remaining after the request %d, want %d (the reservation of %d stands)", got, 1000-c.want, c.want)
			}
		})
	}
	t.Run("statuses", func(t *testing.T) {
		// Tenant 25 holds 400: a hidden reservation of 500 does not fit
		// (429); one that states 300 does.
		if resp, body := sf.post(t, 25, "/v1/chat/header?u=600", `{"max_tokens":500}`, nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("using 600: %d %s", resp.StatusCode, body)
		}
		resp, body := send(25, bytes.NewReader(gz.Bytes()), map[string]string{"Content-Encoding": "gzip", "X-Max-Tokens": "1"})
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Errorf("gzip'd body with 400 left: %d %s, want 429 (500 reserved)", resp.StatusCode, body)
		}
		if resp, body := send(25, strings.NewReader(`{"max_tokens":300}`), nil); resp.StatusCode != http.StatusOK {
			t.Errorf("stating 300 with 400 left: %d %s, want 200", resp.StatusCode, body)
		}
		// n completions of 200 each ask for 600, above max: 400.
		if resp, body := send(22, strings.NewReader(`{"max_tokens":200,"n":3}`), nil); resp.StatusCode != http.StatusBadRequest ||
			!strings.Contains(body, "reserve 600 units") {
			t.Errorf("3 completions of 200, max 500: %d %s, want 400 saying 600", resp.StatusCode, body)
		}
		// Above server.max_body_bytes: 413, nothing reserved.
		resp, body = send(24, strings.NewReader(`{"messages":"`+strings.Repeat("y", 2<<20)+`"}`), nil)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, "payload_too_large") {
			t.Errorf("body above max_body_bytes: %d %s, want 413 payload_too_large", resp.StatusCode, body)
		}
		if got := sf.remaining(t, 24)["tokens"]; got != 1000 {
			t.Errorf("a 413 took %d tokens", 1000-got)
		}
		// X-Max-Tokens twice on a request without a body: the upstream
		// may read either line (or both), so it states nothing the
		// gateway can reserve: 400 naming the header, nothing reserved.
		req, _ := http.NewRequest("POST", sf.front.URL+"/v1/chat/missing", http.NoBody)
		req.Header.Set("X-API-Key", "KEY23")
		req.Header["X-Max-Tokens"] = []string{"1", "400"}
		hresp, b := sf.send(t, req)
		if hresp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "X-Max-Tokens") {
			t.Errorf("X-Max-Tokens twice: %d %s, want 400 naming the header", hresp.StatusCode, b)
		}
		if got := sf.remaining(t, 23)["tokens"]; got != 1000 {
			t.Errorf("a repeated X-Max-Tokens reserved %d tokens", 1000-got)
		}
		// The same header in another spelling: an upstream that reads
		// X_Max_Tokens as X-Max-Tokens sees it twice (or only the other
		// one): 400 as above; alone and above max, 400 as for X-Max-Tokens.
		for _, c := range []struct {
			hdr  map[string][]string
			want string // in the body
		}{
			{map[string][]string{"X-Max-Tokens": {"1"}, "X_max_tokens": {"400"}}, "X-Max-Tokens"},
			{map[string][]string{"X_max_tokens": {"100000"}}, "reserve 100000 units"},
		} {
			req, _ := http.NewRequest("POST", sf.front.URL+"/v1/chat/missing", http.NoBody)
			req.Header.Set("X-API-Key", "KEY22")
			for k, v := range c.hdr {
				req.Header[k] = v
			}
			hresp, b := sf.send(t, req)
			if hresp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), c.want) {
				t.Errorf("%v: %d %s, want 400 saying %q", c.hdr, hresp.StatusCode, b, c.want)
			}
		}
		if got := sf.remaining(t, 22)["tokens"]; got != 1000 {
			t.Errorf("X-Max-Tokens in two spellings or above max reserved %d tokens", 1000-got)
		}
	})
}

// TestSettleReserveHeaderNotInTrailers: a chunked body may end in
// trailers, which some servers merge into the headers: a caller could
// state X-Max-Tokens: 1 in the header, have it reserved, and send 400 in
// a trailer the upstream then reads. The upstream receives no trailer
// under the reserve_from header's name, in any spelling; others pass.
func TestSettleReserveHeaderNotInTrailers(t *testing.T) {
	sf := newSettleFixture(t)
	const body = `{"max_tokens":1}`
	resp, got := rawGet(t, sf.front.URL, "POST /v1/chat/trailers?u=1 HTTP/1.1\r\nHost: gw\r\nX-API-Key: KEY1\r\n"+
		"Transfer-Encoding: chunked\r\nTrailer: X-Max-Tokens, X_Max_Tokens, X-Checksum\r\n\r\n"+
		fmt.Sprintf("%x\r\n%s\r\n", len(body), body)+"0\r\nX-Max-Tokens: 400\r\nX_Max_Tokens: 400\r\nX-Checksum: abc\r\n\r\n")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
	seen := resp.Header.Values("X-Seen-Trailer")
	for _, v := range seen {
		if name, _, _ := strings.Cut(v, "="); headername.Equal(name, "x-max-tokens") {
			t.Errorf("the upstream received the trailer %s", v)
		}
	}
	if !slices.Contains(seen, "X-Checksum=abc") {
		t.Errorf("upstream trailers %q, want X-Checksum=abc among them", seen)
	}
}

// TestSettleUpstreamTimeoutKeepsReservation: an upstream that had the
// whole request and did not answer within its timeout (504) may have
// worked on it all along, and a caller can make that happen on purpose
// (a large max_tokens, no streaming): the reservation stands, counted
// missing, rather than going back as for an upstream never reached.
func TestSettleUpstreamTimeoutKeepsReservation(t *testing.T) {
	sf := newSettleFixture(t)
	resp, body := sf.post(t, 1, "/v1/slow", `{"max_tokens":400}`, nil)
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("status %d: %s; want 504", resp.StatusCode, body)
	}
	if got := sf.remaining(t, 1)["tokens"]; got != 600 {
		t.Errorf("after a 504: remaining %d, want 600 (the reservation of 400 stands)", got)
	}
	fams := sf.obs.scrape(t)
	for result, want := range map[string]float64{"missing": 1, "refund": 0} {
		if got := counterValue(fams, "quotagate_settlements_total", map[string]string{"policy": "tokens", "result": result}); got != want {
			t.Errorf("quotagate_settlements_total{policy=tokens,result=%s} = %v, want %v", result, got, want)
		}
	}
}

// TestSettleUpstreamHangupKeepsReservation: an upstream that read the
// whole request and then closed the connection without answering (a
// worker that crashed after the work, which a caller may bring about on
// purpose) makes the gateway answer 502, as an upstream never reached
// does, but the reservation stands, counted missing: the upstream had the
// request. (TestSettleFromResponses/upstream_failure_refunds: a refused
// connection, which no request reached, gives it all back.)
func TestSettleUpstreamHangupKeepsReservation(t *testing.T) {
	sf := newSettleFixture(t)
	resp, body := sf.post(t, 1, "/v1/chat/hangup", `{"max_tokens":400}`, nil)
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d: %s; want 502", resp.StatusCode, body)
	}
	if got := sf.remaining(t, 1); got["tokens"] != 600 || got["requests"] != 9600 {
		t.Errorf("after the upstream hung up: remaining %v, want tokens 600 (the reservation of 400 stands), requests 9600 (not settled)", got)
	}
	fams := sf.obs.scrape(t)
	for result, want := range map[string]float64{"missing": 1, "refund": 0} {
		if got := counterValue(fams, "quotagate_settlements_total", map[string]string{"policy": "tokens", "result": result}); got != want {
			t.Errorf("quotagate_settlements_total{policy=tokens,result=%s} = %v, want %v", result, got, want)
		}
	}
}
