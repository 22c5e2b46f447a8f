package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/internal/redistest"
)

// settleBinaryConfig gives anonymous callers 1000 tokens per Berlin month
// (a calendar window: nothing refills during the test), reserved per chat
// request (100, or max_tokens up to 500) and settled from the response.
const settleBinaryConfig = `
server: {listen: 127.0.0.1:0, admin_listen: 127.0.0.1:0}
identity: {anonymous: {tier: anon}}
tiers: {anon: {}}
policies:
  tokens:
    algorithm: fixed_window
    limits: {"*": {rate: 1000, calendar: {unit: month, time_zone: Europe/Berlin}}}
upstreams: {llm: {url: UPSTREAM}}
routes:
  - name: chat
    method: POST
    path: /v1/chat/{mode}
    upstream: llm
    policies: [tokens]
    cost:
      reserve: 100
      reserve_from: {json: max_tokens}
      max: 500
      settle_from: {header: X-Usage, json: usage.total_tokens, sse: usage.total_tokens}
`

// usageUpstream is an upstream of the test's own that reports the usage
// ?u= in a JSON body (/v1/chat/json), an SSE stream (/v1/chat/sse), or a
// header (any other path).
func usageUpstream(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		u := r.URL.Query().Get("u")
		switch r.URL.Path {
		case "/v1/chat/json":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"choices":[{"message":"hi"}],"usage":{"total_tokens":%s}}`, u)
		case "/v1/chat/sse":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: {\"choices\":[]}\n\ndata: {\"usage\":{\"total_tokens\":%s}}\n\ndata: [DONE]\n\n", u)
		default:
			w.Header().Set("X-Usage", u)
		}
	}))
	t.Cleanup(up.Close)
	return up
}

// settleClient posts chat requests to gateways and reads their quota
// endpoint as one anonymous caller.
type settleClient struct{ t *testing.T }

func (c settleClient) post(base, path, body string) (int, string) {
	c.t.Helper()
	resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

type quota struct{ Remaining, Debt float64 }

func (c settleClient) read(base string) quota {
	c.t.Helper()
	resp, err := http.Get(base + "/_quota")
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep struct{ Policies []quota }
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || json.Unmarshal(b, &rep) != nil || len(rep.Policies) != 1 {
		c.t.Fatalf("GET /_quota: %d %s", resp.StatusCode, b)
	}
	return rep.Policies[0]
}

// await waits until base's quota endpoint moves from before (the
// reservation alone) to want: settlement follows the response on a
// goroutine of its own. Any other state is a wrong answer; before still
// there after 10 s is a settlement that never came.
func (c settleClient) await(base, what string, before, want quota) {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := c.read(base)
		switch {
		case got == want:
			return
		case got != before:
			c.t.Fatalf("%s: /_quota says %+v, want %+v", what, got, want)
		case time.Now().After(deadline):
			proctest.FatalOverrun(c.t, "%s: /_quota still says %+v (the reservation alone) after 10 s, want %+v", what, got, want)
		}
		time.Sleep(100 * time.Millisecond) // a real process settles on real time; reads are bounded per caller
	}
}

// TestBinarySettlesFromResponses: against the built binary and an
// upstream of the test's own, a JSON completion that used less than its
// reservation is refunded the difference, an SSE stream's last usage is
// settled, and a usage above the reservation is charged into debt, which
// the quota endpoint reports and the next request waits out.
func TestBinarySettlesFromResponses(t *testing.T) {
	up := usageUpstream(t)
	proc := startBinary(t, strings.ReplaceAll(settleBinaryConfig, "UPSTREAM", up.URL))
	c, gw := settleClient{t}, proc.URL()
	if code, body := c.post(gw, "/v1/chat/json?u=120", `{"max_tokens":300}`); code != 200 {
		t.Fatalf("json: %d %s", code, body)
	}
	c.await(gw, "300 reserved, 120 used", quota{Remaining: 700}, quota{Remaining: 880})
	if code, body := c.post(gw, "/v1/chat/sse?u=40", `{"max_tokens":100}`); code != 200 || !strings.Contains(body, "[DONE]") {
		t.Fatalf("sse: %d %s", code, body)
	}
	c.await(gw, "then 100 reserved, 40 streamed", quota{Remaining: 780}, quota{Remaining: 840})
	if code, body := c.post(gw, "/v1/chat/header?u=1500", `{"max_tokens":100}`); code != 200 {
		t.Fatalf("header: %d %s", code, body)
	}
	c.await(gw, "then 100 reserved, 1500 used", quota{Remaining: 740}, quota{Remaining: 0, Debt: 660})
	code, body := c.post(gw, "/v1/chat/header?u=1", `{"max_tokens":100}`)
	if code != http.StatusTooManyRequests || !strings.Contains(body, `"policy":"tokens"`) {
		t.Fatalf("in debt: %d %s, want 429 until the month ends", code, body)
	}
	if code, body := c.post(gw, "/v1/chat/header?u=1", `{"max_tokens":501}`); code != http.StatusBadRequest {
		t.Fatalf("above max: %d %s, want 400", code, body)
	}
}

// TestBinarySettlesFleetWide: two gateway processes share one Redis; what
// one settles, the other sees: its refund in the other's quota endpoint,
// its charge as debt that the other denies.
func TestBinarySettlesFleetWide(t *testing.T) {
	srv := redistest.StartStandalone(t)
	cfg := strings.ReplaceAll(settleBinaryConfig, "UPSTREAM", usageUpstream(t).URL)
	env := []string{"QUOTAGATE_STORE_KIND=redis", "QUOTAGATE_STORE_REDIS_ADDRS=" + srv.Addr,
		"QUOTAGATE_STORE_REDIS_TIMEOUT=1s", "QUOTAGATE_STORE_REDIS_KEY_PREFIX=fw" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	a, b := startBinary(t, cfg, env...).URL(), startBinary(t, cfg, env...).URL()
	c := settleClient{t}
	if code, body := c.post(a, "/v1/chat/json?u=120", `{"max_tokens":300}`); code != 200 {
		t.Fatalf("json on a: %d %s", code, body)
	}
	c.await(b, "b after a reserved 300 and used 120", quota{Remaining: 700}, quota{Remaining: 880})
	if code, body := c.post(a, "/v1/chat/header?u=1500", `{"max_tokens":100}`); code != 200 {
		t.Fatalf("header on a: %d %s", code, body)
	}
	c.await(b, "b after a reserved 100 and used 1500", quota{Remaining: 780}, quota{Remaining: 0, Debt: 620})
	if code, body := c.post(b, "/v1/chat/header?u=1", `{"max_tokens":100}`); code != http.StatusTooManyRequests {
		t.Fatalf("b in the debt a charged: %d %s, want 429", code, body)
	}
}
