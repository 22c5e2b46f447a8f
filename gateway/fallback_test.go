package gateway

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

// fallbackConfig lists two upstreams on one route, a provisioned one (ptu)
// and a pay-as-you-go one (paygo), each with its own token policy; rpm is
// listed by both, one bucket. Every limit refills too slowly to matter
// but for Retry-After: ptu_tpm one token per 100 s, paygo_tpm one per
// 166.7 s.
const fallbackConfig = `
server: {listen: 127.0.0.1:0, admin_listen: 127.0.0.1:0}` + settleHead + `
  rpm:       {limits: {"*": {rate: 100, per: 100000s, burst: 100}}}
  ptu_tpm:   {limits: {"*": {rate: 1000, per: 100000s, burst: 1000}}}
  paygo_tpm: {limits: {"*": {rate: 600, per: 100000s, burst: 600}}}
upstreams:
  ptu:   {url: UPSTREAM}
  paygo: {url: UPSTREAM}
routes:
  - name: chat
    method: POST
    path: /v1/chat/{mode}
    upstreams:
      - {upstream: ptu, policies: [rpm, {name: ptu_tpm, cost: tokens}]}
      - {upstream: paygo, policies: [rpm, {name: paygo_tpm, cost: tokens}]}
    measures:
      tokens:
        reserve_from: {json: max_tokens}
        max: 500
        settle_from: {json: usage.total_tokens}
`

// TestFallbackAcrossUpstreams: on the memory store, Redis and a Cluster,
// a request the first upstream's policies deny is decided against the
// second's and forwarded there, its reservation taken from the second
// only (nothing stays on the first, rpm is taken once) and settled
// there; a request both deny is a 429 with the sooner of their waits.
func TestFallbackAcrossUpstreams(t *testing.T) {
	for _, store := range everyStore {
		t.Run(store.name, func(t *testing.T) {
			addrs, _ := store.start(t)
			sf := newSettleFixtureWith(t, nil, addrs, fallbackConfig, time.Second)
			post := func(maxTokens, used int) (*http.Response, string) {
				t.Helper()
				return sf.post(t, 1, "/v1/chat/json?u="+strconv.Itoa(used), `{"max_tokens":`+strconv.Itoa(maxTokens)+`}`, nil)
			}
			expect := func(step string, want map[string]int64) {
				t.Helper()
				if got := sf.remaining(t, 1); !sameUnits(got, want) {
					t.Errorf("%s: remaining %v, want %v", step, got, want)
				}
			}
			// ptu admits two requests of 500 reserved, 400 used each.
			for range 2 {
				resp, body := post(500, 400)
				if resp.StatusCode != http.StatusOK || resp.Header.Get("Quotagate-Upstream") != "ptu" {
					t.Fatalf("status %d upstream %q: %s, want 200 from ptu", resp.StatusCode, resp.Header.Get("Quotagate-Upstream"), body)
				}
			}
			expect("ptu settled", map[string]int64{"rpm": 98, "ptu_tpm": 200, "paygo_tpm": 600})

			// 500 more do not fit ptu's 200: paygo admits and is settled.
			resp, body := post(500, 300)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Quotagate-Upstream") != "paygo" {
				t.Fatalf("status %d upstream %q: %s, want 200 from paygo", resp.StatusCode, resp.Header.Get("Quotagate-Upstream"), body)
			}
			expect("moved to paygo", map[string]int64{"rpm": 97, "ptu_tpm": 200, "paygo_tpm": 300})

			// 400 fit neither: 429, nothing taken, the wait paygo's
			// (100 tokens at one per 166.7 s, sooner than ptu's 200 at one
			// per 100 s).
			resp, body = post(400, 400)
			if resp.StatusCode != http.StatusTooManyRequests || deniedBy(t, body) != "paygo_tpm" {
				t.Fatalf("status %d %s, want 429 by paygo_tpm", resp.StatusCode, body)
			}
			// The exact wait is 16666.7 s; Retry-After adds up to 10 s of
			// jitter. ptu's would be 20000 s.
			if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); ra < 16667 || ra > 16677 {
				t.Errorf("Retry-After = %d, want 16667 to 16677", ra)
			}
			if got := resp.Header.Get("Quotagate-Upstream"); got != "" {
				t.Errorf("a denial says Quotagate-Upstream %q", got)
			}
			expect("both denied", map[string]int64{"rpm": 97, "ptu_tpm": 200, "paygo_tpm": 300})

			// 200 fit ptu again: the first candidate is asked first.
			resp, body = post(200, 150)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Quotagate-Upstream") != "ptu" {
				t.Fatalf("status %d upstream %q: %s, want 200 from ptu", resp.StatusCode, resp.Header.Get("Quotagate-Upstream"), body)
			}
			expect("back on ptu", map[string]int64{"rpm": 96, "ptu_tpm": 50, "paygo_tpm": 300})
		})
	}
}
