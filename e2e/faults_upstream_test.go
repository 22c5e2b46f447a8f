package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
)

// TestFaultUpstream: the upstream hangs, resets connections, or answers
// 503, on different paths, while healthy requests go on beside them.
// Expectation (upstream timeout 300 ms):
//
//   - hang: 504 problem+json upstream_timeout, after the upstream timeout
//     and within it plus a margin;
//   - reset (connection closed without a response): 502 problem+json
//     upstream_unavailable;
//   - 5xx: the upstream's own 503 and body, passed through unchanged;
//   - healthy requests: 200 throughout; every request answered, and the
//     gateway is healthy afterwards.
func TestFaultUpstream(t *testing.T) {
	const upstreamTimeout = 300 * time.Millisecond
	up := startUpstream(t)
	cfg := limiterConfig(up.URL(), nil, "acme")
	cfg.Upstreams["up"] = upstreamCfg{URL: up.URL(), Timeout: upstreamTimeout.String()}
	for _, m := range []string{"ok", "hang", "reset", "fail"} {
		cfg.route(m, "GET", "/"+m+"/{rest...}", 1)
	}
	gw := startGateway(t, "gw", cfg)

	modes := []string{"ok", "hang", "reset", "fail"}
	outs := load{workers: 8, duration: 1500 * time.Millisecond, pace: 5 * time.Millisecond, keepBody: true, next: func(w, i int) call {
		m := modes[(w+i)%len(modes)]
		return call{label: m, base: gw.URL, path: "/" + m + "/x", key: "key-acme"}
	}}.run(t)

	want := map[string]struct {
		status int
		code   string // problem "error" member; "" = the upstream's own body
	}{
		"ok":    {200, ""},
		"hang":  {504, "upstream_timeout"},
		"reset": {502, "upstream_unavailable"},
		"fail":  {503, ""},
	}
	for _, m := range modes {
		s := summarize(outs, byLabel(m))
		w := want[m]
		t.Logf("%s: %s, p50 %v worst %v", m, s.mix(), s.pct(50), s.worst())
		// A 504 after the upstream timeout where another answer was due
		// means the upstream (on this busy machine) did not answer in time.
		late := 0
		for _, o := range outs {
			if o.label == m && o.status == http.StatusGatewayTimeout && w.status != http.StatusGatewayTimeout && o.latency() >= upstreamTimeout {
				late++
			}
		}
		switch {
		case s.n == 0 || s.unanswered > 0 || s.status[w.status]+late != s.n:
			t.Errorf("%s: %s, want only %d", m, s.mix(), w.status)
		case late > 0:
			proctest.Overrun(t, "%s: %s, want only %d: %d requests passed the upstream timeout %v", m, s.mix(), w.status, late, upstreamTimeout)
		}
		for _, o := range outs {
			if o.label != m || o.status != w.status {
				continue
			}
			checkUpstreamAnswer(t, o, w.code)
			break
		}
		worstOK := time.Duration(0)
		if m == "hang" {
			if s.pct(1) < upstreamTimeout {
				t.Errorf("hang: fastest answer %v, before the upstream timeout %v", s.pct(1), upstreamTimeout)
			}
			worstOK = upstreamTimeout
		}
		if s.worst() > worstOK+latencyMargin+100*time.Millisecond {
			proctest.Overrun(t, "%s: worst latency %v, want at most %v", m, s.worst(), worstOK+latencyMargin+100*time.Millisecond)
		}
		if m == "ok" {
			continue
		}
		recordFault(t, faultRecord{
			Fault:      map[string]string{"hang": "upstream hangs (timeout 300 ms)", "reset": "upstream resets connections", "fail": "upstream answers 503"}[m],
			Expect:     fmt.Sprintf("%d %s; healthy requests beside it 200", w.status, map[bool]string{true: w.code, false: "passed through"}[w.code != ""]),
			Mix:        fmt.Sprintf("%s (healthy beside it: %s)", s.mix(), summarize(outs, byLabel("ok")).mix()),
			Worst:      s.worst(),
			Unanswered: s.unanswered,
			Over:       "n/a (no limit involved)",
		})
	}
	resets := 0
	for _, r := range up.requests() {
		if strings.HasPrefix(r.Path, "/reset/") {
			resets++
		}
		if r.Auth != "" || r.Tenant != "acme" {
			t.Errorf("upstream saw Authorization %q, X-Quotagate-Tenant %q; want none and acme", r.Auth, r.Tenant)
			break
		}
	}
	t.Logf("upstream received %d /reset requests for %d sent to the gateway", resets, summarize(outs, byLabel("reset")).n)
	if readyzStatus(gw) != 200 {
		t.Error("gateway not ready after the upstream faults")
	}
}

// checkUpstreamAnswer checks a failed exchange's body: problem+json with
// the error code, or (code "") the upstream's own plain-text answer.
func checkUpstreamAnswer(t *testing.T, o outcome, code string) {
	t.Helper()
	if code == "" {
		if o.status != 200 && (string(o.body) != "upstream failed" || o.header.Get("Content-Type") != "text/plain") {
			t.Errorf("%s: body %q (%s), want the upstream's own", o.label, o.body, o.header.Get("Content-Type"))
		}
		return
	}
	var p struct {
		Error     string `json:"error"`
		RequestID string `json:"request_id"`
	}
	if o.header.Get("Content-Type") != "application/problem+json" || json.Unmarshal(o.body, &p) != nil || p.Error != code || p.RequestID == "" {
		t.Errorf("%s: %s body %s, want problem+json error %s with a request_id", o.label, o.header.Get("Content-Type"), o.body, code)
	}
}
