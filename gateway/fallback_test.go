package gateway

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
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

// slotFallbackConfig is fallbackConfig with a concurrency policy on each
// upstream (ptu_slots one slot, paygo_slots two) and, on ptu, two shadow
// policies that record what they would deny: watch, a token bucket of
// 500, and probe, one slot shared by every tenant.
var slotFallbackConfig = strings.NewReplacer(
	"  paygo_tpm: ", `  ptu_slots:   {algorithm: concurrency, limits: {"*": {max: 1}}}
  paygo_slots: {algorithm: concurrency, limits: {"*": {max: 2}}}
  watch:       {shadow: true, limits: {"*": {rate: 500, per: 100000s, burst: 500}}}
  probe:       {scope: global, shadow: true, algorithm: concurrency, limits: {"*": {max: 1}}}
  paygo_tpm: `,
	"policies: [rpm, {name: ptu_tpm, cost: tokens}]", "policies: [rpm, ptu_slots, probe, {name: ptu_tpm, cost: tokens}, {name: watch, cost: tokens}]",
	"policies: [rpm, {name: paygo_tpm, cost: tokens}]", "policies: [rpm, paygo_slots, {name: paygo_tpm, cost: tokens}]",
).Replace(fallbackConfig)

// TestFallbackOnConcurrency: on the memory store, Redis and a Cluster, a
// request that finds the first upstream's slot taken, or that its slot
// would fit but another of its policies denies, is served by the next
// with nothing held or taken on the first (no slot, no tokens, rpm taken
// once); a shadow policy that would deny moves nothing and takes nothing
// from the next; a request every upstream denies holds no slot anywhere.
func TestFallbackOnConcurrency(t *testing.T) {
	for _, store := range everyStore {
		t.Run(store.name, func(t *testing.T) {
			addrs, _ := store.start(t)
			sf := newSettleFixtureWith(t, nil, addrs, slotFallbackConfig, time.Second)
			// do serves one request of tenant n and returns once its
			// settlement and its slots' release are done.
			do := func(n, maxTokens int, query string) *httptest.ResponseRecorder {
				hdr := map[string]string{"X-API-Key": "KEY" + strconv.Itoa(n), "Content-Type": "application/json"}
				w := sf.do(http.MethodPost, "/v1/chat/"+query, hdr, strings.NewReader(`{"max_tokens":`+strconv.Itoa(maxTokens)+`}`))
				sf.gw.settling.Wait()
				sf.gw.slots.keeper.Wait()
				return w
			}
			start := func(n, maxTokens, used int, gate string) <-chan *httptest.ResponseRecorder {
				ch := make(chan *httptest.ResponseRecorder, 1)
				go func() { ch <- do(n, maxTokens, "held?u="+strconv.Itoa(used)+"&g="+gate) }()
				if got := sf.held.next(t); got != gate {
					t.Fatalf("upstream got %q, want %q", got, gate)
				}
				return ch
			}
			served := func(step string, w *httptest.ResponseRecorder, upstream string) {
				t.Helper()
				if w.Code != http.StatusOK || w.Header().Get("Quotagate-Upstream") != upstream {
					t.Fatalf("%s: status %d upstream %q: %s, want 200 from %s", step, w.Code, w.Header().Get("Quotagate-Upstream"), w.Body.String(), upstream)
				}
			}
			expect := func(step string, want map[string]int64, ptuHeld, paygoHeld int64) {
				t.Helper()
				if got := sf.remaining(t, 1); !sameUnits(got, want) {
					t.Errorf("%s: remaining %v, want %v", step, got, want)
				}
				if p, q := sf.gw.slots.inflightOf("ptu_slots"), sf.gw.slots.inflightOf("paygo_slots"); p != ptuHeld || q != paygoHeld {
					t.Errorf("%s: slots held ptu %d paygo %d, want %d and %d", step, p, q, ptuHeld, paygoHeld)
				}
			}
			expect("idle", map[string]int64{"probe": 1, "rpm": 100, "ptu_slots": 1, "ptu_tpm": 1000, "watch": 500, "paygo_slots": 2, "paygo_tpm": 600}, 0, 0)

			// a holds ptu's one slot while its upstream works.
			a := start(1, 300, 200, "a")
			expect("a on ptu", map[string]int64{"probe": 0, "rpm": 99, "ptu_slots": 0, "ptu_tpm": 700, "watch": 200, "paygo_slots": 2, "paygo_tpm": 600}, 1, 0)

			// b finds ptu's slot taken: paygo serves it, ptu keeps only a's
			// slot and none of b's 100 tokens.
			served("b", do(1, 100, "json?u=50"), "paygo")
			expect("b moved to paygo", map[string]int64{"probe": 0, "rpm": 98, "ptu_slots": 0, "ptu_tpm": 700, "watch": 200, "paygo_slots": 2, "paygo_tpm": 550}, 1, 0)

			sf.held.open("a")
			served("a", <-a, "ptu")
			expect("a settled to 200", map[string]int64{"probe": 1, "rpm": 98, "ptu_slots": 1, "ptu_tpm": 800, "watch": 300, "paygo_slots": 2, "paygo_tpm": 550}, 0, 0)

			// d's 400 exceed watch's 300: the shadow policy would deny, so
			// ptu serves d anyway; watch takes nothing, nor does paygo.
			served("d", do(1, 400, "json?u=400"), "ptu")
			expect("d past the shadow policy", map[string]int64{"probe": 1, "rpm": 97, "ptu_slots": 1, "ptu_tpm": 400, "watch": 300, "paygo_slots": 2, "paygo_tpm": 550}, 0, 0)

			// c's 500 fit ptu's slot but not ptu_tpm's 400: paygo serves c,
			// and while it works ptu's slot is free (none left behind).
			c := start(1, 500, 100, "c")
			expect("c on paygo", map[string]int64{"probe": 1, "rpm": 96, "ptu_slots": 1, "ptu_tpm": 400, "watch": 300, "paygo_slots": 1, "paygo_tpm": 50}, 0, 1)
			sf.held.open("c")
			served("c", <-c, "paygo")
			expect("c settled to 100", map[string]int64{"probe": 1, "rpm": 96, "ptu_slots": 1, "ptu_tpm": 400, "watch": 300, "paygo_slots": 2, "paygo_tpm": 450}, 0, 0)

			// 500 fit neither: 429 by paygo_tpm (50 tokens at 0.006 a
			// second, 8333.4 s, sooner than ptu_tpm's 100 at 0.01: 10000 s),
			// nothing taken, no slot held on either.
			w := do(1, 500, "json?u=1")
			if w.Code != http.StatusTooManyRequests || deniedBy(t, w.Body.String()) != "paygo_tpm" {
				t.Fatalf("e: status %d %s, want 429 by paygo_tpm", w.Code, w.Body.String())
			}
			expect("e denied by both", map[string]int64{"probe": 1, "rpm": 96, "ptu_slots": 1, "ptu_tpm": 400, "watch": 300, "paygo_slots": 2, "paygo_tpm": 450}, 0, 0)

			// Tenant 2 holds the one probe slot every tenant shares; h of
			// tenant 1 finds it taken, and ptu serves h anyway: a shadow
			// slot moves nothing and takes nothing from paygo, nor a slot.
			f := start(2, 100, 100, "f")
			served("h", do(1, 100, "json?u=100"), "ptu")
			expect("h past the shadow slot", map[string]int64{"probe": 0, "rpm": 95, "ptu_slots": 1, "ptu_tpm": 300, "watch": 200, "paygo_slots": 2, "paygo_tpm": 450}, 1, 0)
			if n := sf.gw.slots.inflightOf("probe"); n != 1 {
				t.Errorf("probe slots held %d, want 1 (tenant 2's only)", n)
			}
			sf.held.open("f")
			served("f", <-f, "ptu")
			expect("f done", map[string]int64{"probe": 1, "rpm": 95, "ptu_slots": 1, "ptu_tpm": 300, "watch": 200, "paygo_slots": 2, "paygo_tpm": 450}, 0, 0)
		})
	}
}
