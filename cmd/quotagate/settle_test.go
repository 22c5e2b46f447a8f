package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
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

// TestBinarySettlesFromResponses: against the built binary and an
// upstream of the test's own, a JSON completion that used less than its
// reservation is refunded the difference, an SSE stream's last usage is
// settled, and a usage above the reservation is charged into debt, which
// the quota endpoint reports and the next request waits out.
func TestBinarySettlesFromResponses(t *testing.T) {
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
	proc := startBinary(t, strings.ReplaceAll(settleBinaryConfig, "UPSTREAM", up.URL))

	post := func(path, body string) (int, string) {
		t.Helper()
		resp, err := http.Post(proc.URL()+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	type quota struct{ Remaining, Debt float64 }
	read := func() quota {
		t.Helper()
		resp, err := http.Get(proc.URL() + "/_quota")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var rep struct{ Policies []quota }
		if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || json.Unmarshal(b, &rep) != nil || len(rep.Policies) != 1 {
			t.Fatalf("GET /_quota: %d %s", resp.StatusCode, b)
		}
		return rep.Policies[0]
	}
	// Settlement follows the response on a goroutine of its own: wait for
	// the state to move from before (the reservation alone) to want; any
	// other state is a wrong answer, before still there after 10 s a
	// settlement that never came.
	await := func(what string, before, want quota) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := read()
			switch {
			case got == want:
				return
			case got != before:
				t.Fatalf("%s: /_quota says %+v, want %+v", what, got, want)
			case time.Now().After(deadline):
				proctest.FatalOverrun(t, "%s: /_quota still says %+v (the reservation alone) after 10 s, want %+v", what, got, want)
			}
			time.Sleep(100 * time.Millisecond) // a real process settles on real time; reads are bounded per caller
		}
	}

	if code, body := post("/v1/chat/json?u=120", `{"max_tokens":300}`); code != 200 {
		t.Fatalf("json: %d %s", code, body)
	}
	await("300 reserved, 120 used", quota{Remaining: 700}, quota{Remaining: 880})
	if code, body := post("/v1/chat/sse?u=40", `{}`); code != 200 || !strings.Contains(body, "[DONE]") {
		t.Fatalf("sse: %d %s", code, body)
	}
	await("then 100 reserved, 40 streamed", quota{Remaining: 780}, quota{Remaining: 840})
	if code, body := post("/v1/chat/header?u=1500", `{}`); code != 200 {
		t.Fatalf("header: %d %s", code, body)
	}
	await("then 100 reserved, 1500 used", quota{Remaining: 740}, quota{Remaining: 0, Debt: 660})
	code, body := post("/v1/chat/header?u=1", `{}`)
	if code != http.StatusTooManyRequests || !strings.Contains(body, `"policy":"tokens"`) {
		t.Fatalf("in debt: %d %s, want 429 until the month ends", code, body)
	}
	if code, body := post("/v1/chat/header?u=1", `{"max_tokens":501}`); code != http.StatusBadRequest {
		t.Fatalf("above max: %d %s, want 400", code, body)
	}
}
