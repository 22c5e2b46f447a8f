package gateway

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
)

// resettingUpstream resets every connection until healthy is set, then
// answers 200. arrivals counts the requests that reached it.
type resettingUpstream struct {
	srv      *httptest.Server
	healthy  atomic.Bool
	arrivals atomic.Int64
}

func newResettingUpstream(t *testing.T) *resettingUpstream {
	u := &resettingUpstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.arrivals.Add(1)
		if u.healthy.Load() {
			_, _ = w.Write([]byte("back"))
			return
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = conn.Close()
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// TestUpstreamBreakerOpensAndRecovers: three failures of the upstream open
// its breaker; then the gateway answers 503 upstream_unavailable with
// Retry-After without contacting it, reports the state in /readyz and the
// metric, and a probe after the cooldown closes it again.
func TestUpstreamBreakerOpensAndRecovers(t *testing.T) {
	up := newResettingUpstream(t)
	base := strings.Replace(baseConfig, "  dead: {url: DEADURL, timeout: 300ms}",
		"  dead: {url: DEADURL, timeout: 300ms, breaker: {failures: 3, cooldown: 10s}}", 1)
	o := newObservedFixtureWith(t, base, up.srv)
	for range 3 {
		problemBody(t, o.do("GET", "/v1/dead", nil, nil), http.StatusBadGateway, codeUpstreamUnavailable)
	}
	before := up.arrivals.Load()
	o.clock.Add(2500 * time.Millisecond)
	w := o.do("GET", "/v1/dead", nil, nil)
	problemBody(t, w, http.StatusServiceUnavailable, codeUpstreamUnavailable)
	if ra := w.Header().Get("Retry-After"); ra != "8" {
		t.Errorf("Retry-After = %q, want 8 (7.5s left, rounded up)", ra)
	}
	if n := up.arrivals.Load() - before; n != 0 {
		t.Fatalf("%d requests reached the upstream through an open breaker", n)
	}
	if got := readyzUpstreams(t, o.fixture); got["dead"] != "open" {
		t.Errorf("/readyz upstreams = %v, want dead open", got)
	}
	if m := scrapeMetrics(t, o); !regexp.MustCompile(`(?m)^quotagate_upstream_breaker_state\{[^}]*upstream="dead"[^}]*\} 2$`).MatchString(m) {
		t.Errorf("metrics lack the open breaker:\n%s", grepLines(m, "breaker"))
	}
	up.healthy.Store(true)
	o.clock.Add(7500 * time.Millisecond)
	w = o.do("GET", "/v1/dead", nil, nil)
	if w.Code != http.StatusOK || w.Body.String() != "back" {
		t.Fatalf("probe after the cooldown: %d %q, want 200 back", w.Code, w.Body.String())
	}
	if got := readyzUpstreams(t, o.fixture); got["dead"] != "closed" {
		t.Errorf("/readyz upstreams after recovery = %v, want dead closed", got)
	}
}

func readyzUpstreams(t *testing.T, f *fixture) map[string]string {
	t.Helper()
	w := httptest.NewRecorder()
	f.gw.Admin(http.NotFoundHandler()).ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("/readyz = %d %s, want 200: an open upstream breaker leaves the gateway ready", w.Code, w.Body.String())
	}
	var body struct {
		Upstreams map[string]string `json:"upstreams"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	return body.Upstreams
}

func scrapeMetrics(t *testing.T, o *observed) string {
	t.Helper()
	w := httptest.NewRecorder()
	o.metrics.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	return w.Body.String()
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestShedFreeTierWhileEnterprisePasses: once the upstream answered slower
// than its target, a free caller is shed with 503 overloaded (problem+json,
// Retry-After, counted per tier) while the enterprise caller still passes.
func TestShedFreeTierWhileEnterprisePasses(t *testing.T) {
	base := strings.Replace(baseConfig, "  patient: {url: UPSTREAM, timeout: 10s}",
		"  patient: {url: UPSTREAM, timeout: 10s, shedding: {target_latency: 50ms, min_inflight: 2, max_inflight: 100, priority: [enterprise, free, anonymous]}}", 1)
	o := newObservedFixtureWith(t, base, nil)
	// One response far over the target (the upstream's /v1/gated answers
	// when released, here after 300ms) cuts the limit to its floor.
	go func() {
		time.Sleep(300 * time.Millisecond) // the upstream's latency, not synchronization
		o.upstream.release <- struct{}{}
	}()
	if w := o.do("GET", "/v1/gated", bearer(enterpriseKey), nil); w.Code != http.StatusOK {
		t.Fatalf("slow request: %d %s", w.Code, w.Body.String())
	}
	<-o.upstream.arrived
	// An enterprise request holds one of the two places.
	held := make(chan int, 1)
	go func() { held <- o.do("GET", "/v1/gated", bearer(enterpriseKey), nil).Code }()
	select {
	case <-o.upstream.arrived:
	case <-time.After(10 * time.Second):
		proctest.FatalOverrun(t, "the held request did not reach the upstream within 10 s")
	}
	w := o.do("GET", "/v1/open", bearer(freeKey), nil)
	problemBody(t, w, http.StatusServiceUnavailable, codeOverloaded)
	if ra := w.Header().Get("Retry-After"); ra != "1" {
		t.Errorf("Retry-After = %q, want 1", ra)
	}
	if w := o.do("GET", "/v1/open", bearer(enterpriseKey), nil); w.Code != http.StatusOK {
		t.Fatalf("enterprise under saturation: %d %s", w.Code, w.Body.String())
	}
	o.upstream.release <- struct{}{}
	if code := <-held; code != http.StatusOK {
		t.Fatalf("held request: %d", code)
	}
	m := scrapeMetrics(t, o)
	for tier, want := range map[string]string{"free": "1", "enterprise": "0"} {
		re := regexp.MustCompile(`(?m)^quotagate_shed_total\{[^}]*tier="` + tier + `"[^}]*upstream="patient"[^}]*\} ` + want + `$`)
		if !re.MatchString(m) {
			t.Errorf("quotagate_shed_total for %s is not %s:\n%s", tier, want, grepLines(m, "shed"))
		}
	}
}
