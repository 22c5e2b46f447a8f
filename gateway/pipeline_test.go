package gateway

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func TestAllowedRequestIsProxiedWithHeaders(t *testing.T) {
	f := newFixture(t, baseConfig)
	w := f.do("GET", "/v1/transfers/42?x=1", map[string]string{
		"Authorization": "Bearer " + freeKey, "X-Request-ID": "req-abc",
		"Connection": "X-Hop", "X-Hop": "drop-me", "X-Quotagate-Tenant": "spoofed",
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}, nil)
	if w.Code != http.StatusOK || w.Body.String() != "hello from upstream" {
		t.Fatalf("got %d %q", w.Code, w.Body.String())
	}
	if got := w.Header().Get("RateLimit-Policy"); got != `"tenant";q=5;w=5` {
		t.Errorf("RateLimit-Policy = %q", got)
	}
	if got := w.Header().Get("RateLimit"); got != `"tenant";r=4;t=1` {
		t.Errorf("RateLimit = %q", got)
	}
	if w.Header().Get("X-RateLimit-Limit") != "" || w.Header().Get("X-RateLimit-Remaining") != "" {
		t.Error("legacy X-RateLimit headers must not be sent")
	}
	up, _ := f.upstream.Last()
	if up == nil {
		t.Fatal("upstream got nothing")
	}
	checks := map[string]string{
		"X-Request-ID":       "req-abc",
		"X-Quotagate-Tenant": "acme",
		"Authorization":      "",
		"X-Hop":              "",
		"X-Forwarded-For":    "192.0.2.10",
		"X-Forwarded-Proto":  "http",
		"X-Forwarded-Host":   "example.com",
	}
	for k, want := range checks {
		if got := up.Header.Get(k); got != want {
			t.Errorf("upstream header %s = %q, want %q", k, got, want)
		}
	}
	if up.URL.RawQuery != "x=1" || up.URL.Path != "/v1/transfers/42" {
		t.Errorf("upstream URL = %s", up.URL)
	}
	if !strings.Contains(up.Header.Get("traceparent"), "4bf92f3577b34da6a3ce929d0e0e4736") {
		t.Errorf("traceparent not forwarded: %q", up.Header.Get("traceparent"))
	}
}

func TestSpoofedForwardedForFromUntrustedPeerIsIgnored(t *testing.T) {
	f := newFixture(t, baseConfig)
	// Anonymous callers are limited per client address: a caller that lies
	// about X-Forwarded-For must still be counted as its own address.
	for i := 0; i < 5; i++ {
		w := f.do("GET", "/v1/open", map[string]string{"X-Forwarded-For": "198.51.100." + strconv.Itoa(i)}, nil)
		if w.Code != http.StatusOK {
			t.Fatalf("request %d: %d", i, w.Code)
		}
		up, _ := f.upstream.Last()
		if got := up.Header.Get("X-Forwarded-For"); got != "192.0.2.10" {
			t.Fatalf("upstream X-Forwarded-For = %q, want only the peer", got)
		}
	}
	// The anonymous tier's local burst is 5: a sixth request from the same
	// peer is denied even though it claims yet another address.
	w := f.do("GET", "/v1/open", map[string]string{"X-Forwarded-For": "198.51.100.99"}, nil)
	m := problemBody(t, w, http.StatusTooManyRequests, "rate_limited")
	if m["policy"] != "local" {
		t.Fatalf("policy = %v, want local", m["policy"])
	}
}

func TestOverLimitAnswers429PerContract(t *testing.T) {
	f := newFixture(t, baseConfig)
	// transfers.create costs 5 and the free tier's tenant bucket holds 5.
	if w := f.do("POST", "/v1/transfers/1", bearer(freeKey), nil); w.Code != http.StatusOK {
		t.Fatalf("first: %d %s", w.Code, w.Body.String())
	}
	w := f.do("POST", "/v1/transfers/2", bearer(freeKey), nil)
	m := problemBody(t, w, http.StatusTooManyRequests, "rate_limited")
	if m["policy"] != "tenant" {
		t.Fatalf("policy = %v", m["policy"])
	}
	if v, _ := m["violated-policies"].([]any); len(v) != 1 || v[0] != "tenant" {
		t.Fatalf("violated-policies = %v", m["violated-policies"])
	}
	// 5 units at 1/s: exactly 5 s until the cost fits again.
	if m["retry_after_ms"] != float64(5000) {
		t.Fatalf("retry_after_ms = %v, want 5000", m["retry_after_ms"])
	}
	jitter := m["retry_jitter_ms"].(float64)
	ra, err := strconv.Atoi(w.Header().Get("Retry-After"))
	if err != nil || ra < 5 || float64(ra)*1000 < 5000+jitter {
		t.Fatalf("Retry-After = %q with jitter %v: must be whole seconds >= wait + jitter", w.Header().Get("Retry-After"), jitter)
	}
	if got := w.Header().Get("RateLimit-Policy"); got != `"tenant";q=5;w=5` {
		t.Errorf("RateLimit-Policy = %q", got)
	}
	if got := w.Header().Get("RateLimit"); got != `"tenant";r=0;t=5` {
		t.Errorf("RateLimit = %q", got)
	}
	body := w.Body.String()
	for _, leak := range []string{"acme", "free", "qg:", "{t:"} {
		if strings.Contains(body, leak) {
			t.Errorf("429 body leaks %q: %s", leak, body)
		}
	}
	// Waiting exactly the advertised time makes the request fit again;
	// the denied request consumed nothing.
	f.clock.Add(5 * time.Second)
	if w := f.do("POST", "/v1/transfers/3", bearer(freeKey), nil); w.Code != http.StatusOK {
		t.Fatalf("after waiting: %d %s", w.Code, w.Body.String())
	}
}

func TestDeniedRequestConsumesNothingInOtherPolicies(t *testing.T) {
	f := newFixture(t, baseConfig)
	// Enterprise: tenant bucket 100, transfers bucket 10 per minute, cost 5.
	for i := 0; i < 2; i++ {
		if w := f.do("POST", "/v1/transfers/1", bearer(enterpriseKey), nil); w.Code != http.StatusOK {
			t.Fatalf("request %d: %d", i, w.Code)
		}
	}
	w := f.do("POST", "/v1/transfers/1", bearer(enterpriseKey), nil)
	m := problemBody(t, w, http.StatusTooManyRequests, "rate_limited")
	if m["policy"] != "transfers" {
		t.Fatalf("policy = %v", m["policy"])
	}
	// The tenant bucket was charged for two requests (10 of 100) only: the
	// denied one took nothing from it. A GET (cost 1) shows 89 left.
	w = f.do("GET", "/v1/transfers/1", bearer(enterpriseKey), nil)
	if got := w.Header().Get("RateLimit"); got != `"tenant";r=89;t=1` {
		t.Fatalf("RateLimit after denial = %q, want r=89", got)
	}
}

func TestShadowPolicyNeverDenies(t *testing.T) {
	f := newFixture(t, baseConfig)
	for i := 0; i < 8; i++ { // the audit policy allows 5 per hour, in shadow mode
		if w := f.do("GET", "/v1/audit", bearer(enterpriseKey), nil); w.Code != http.StatusOK {
			t.Fatalf("request %d: %d", i, w.Code)
		}
	}
}

func TestConcurrentDenialsGetSpreadRetryAfter(t *testing.T) {
	f := newFixture(t, baseConfig)
	f.do("POST", "/v1/transfers/1", bearer(freeKey), nil)
	seen := map[string]bool{}
	jitters := map[float64]bool{}
	for i := 0; i < 50; i++ {
		w := f.do("POST", "/v1/transfers/1", bearer(freeKey), nil)
		m := problemBody(t, w, http.StatusTooManyRequests, "rate_limited")
		seen[w.Header().Get("Retry-After")] = true
		jitters[m["retry_jitter_ms"].(float64)] = true
	}
	if len(seen) < 2 || len(jitters) < 10 {
		t.Fatalf("denials are not spread: %d Retry-After values, %d jitters", len(seen), len(jitters))
	}
}

func TestUnauthenticated(t *testing.T) {
	f := newFixture(t, baseConfig)
	now := f.clock.Now()
	sign := func(method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(method, claims).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	good := jwt.MapClaims{"sub": "jwt-tenant", "tier": "free", "exp": now.Add(time.Hour).Unix()}
	if w := f.do("GET", "/v1/open", bearer(sign(jwt.SigningMethodHS256, []byte(jwtSecret), good)), nil); w.Code != http.StatusOK {
		t.Fatalf("valid JWT: %d %s", w.Code, w.Body.String())
	}
	expired := jwt.MapClaims{"sub": "jwt-tenant", "tier": "free", "exp": now.Add(-time.Hour).Unix()}
	cases := map[string]map[string]string{
		"unknown api key":    bearer("no-such-key"),
		"x-api-key unknown":  {"X-API-Key": "nope"},
		"basic scheme":       {"Authorization": "Basic dXNlcjpwYXNz"},
		"empty bearer":       {"Authorization": "Bearer "},
		"jwt wrong secret":   bearer(sign(jwt.SigningMethodHS256, []byte("other-secret-0123456789abcdef"), good)),
		"jwt expired":        bearer(sign(jwt.SigningMethodHS256, []byte(jwtSecret), expired)),
		"jwt alg none":       bearer(sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, good)),
		"jwt truncated":      bearer(sign(jwt.SigningMethodHS256, []byte(jwtSecret), good)[:40] + ".x.y"),
		"control characters": {"X-API-Key": "abc\x01def"},
	}
	for name, hdr := range cases {
		t.Run(name, func(t *testing.T) {
			w := f.do("GET", "/v1/open", hdr, nil)
			problemBody(t, w, http.StatusUnauthorized, "unauthenticated")
			if w.Header().Get("RateLimit") != "" {
				t.Fatal("an unauthenticated request must not reach the limiter")
			}
		})
	}
}

func TestNoRoute(t *testing.T) {
	f := newFixture(t, baseConfig)
	for _, target := range []string{"/nope", "/v1/transfers/1/", "/v1/transfers//", "/v1/transfers/..", "/v1/transfers/a%2Fb"} {
		w := f.do("GET", target, bearer(freeKey), nil)
		problemBody(t, w, http.StatusNotFound, "no_route")
	}
	w := f.do("DELETE", "/v1/transfers/1", bearer(freeKey), nil)
	problemBody(t, w, http.StatusNotFound, "no_route")
}

// TestUpstreamFailures: a dead upstream is a 502, and one slower than the
// upstream timeout (300ms) a 504. Nothing is timed: /v1/slow answers 200
// after 2 s, so a 504 is the timeout's doing.
func TestUpstreamFailures(t *testing.T) {
	f := newFixture(t, baseConfig)
	w := f.do("GET", "/v1/dead", bearer(enterpriseKey), nil)
	problemBody(t, w, http.StatusBadGateway, "upstream_unavailable")
	w = f.do("GET", "/v1/slow", bearer(enterpriseKey), nil)
	problemBody(t, w, http.StatusGatewayTimeout, "upstream_timeout")
}

func TestOversizedBodyIs413(t *testing.T) {
	f := newFixture(t, baseConfig)
	w := f.do("POST", "/v1/transfers/1", bearer(enterpriseKey), strings.NewReader(strings.Repeat("x", 2048)))
	problemBody(t, w, http.StatusRequestEntityTooLarge, "payload_too_large")
	if up, _ := f.upstream.Last(); up != nil {
		t.Fatal("an oversized body with a Content-Length must not reach the upstream")
	}
	w = f.do("POST", "/v1/transfers/1", bearer(enterpriseKey), strings.NewReader(strings.Repeat("x", 1000)))
	if w.Code != http.StatusOK {
		t.Fatalf("body within the limit: %d", w.Code)
	}
	if _, body := f.upstream.Last(); len(body) != 1000 {
		t.Fatalf("upstream got %d bytes", len(body))
	}
}

// failingBody yields some bytes, then the error a broken upload gives.
type failingBody struct{ sent bool }

func (b *failingBody) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		return copy(p, "partial"), nil
	}
	return 0, errors.New("malformed chunk")
}

func TestUnreadableBodyIs400NotAnUpstreamFailure(t *testing.T) {
	f := newFixture(t, baseConfig)
	r := httptest.NewRequest("POST", "/v1/transfers/1", &failingBody{})
	r.ContentLength = -1
	r.RemoteAddr = "192.0.2.10:4321"
	r.Header.Set("Authorization", "Bearer "+enterpriseKey)
	w := httptest.NewRecorder()
	f.gw.ServeHTTP(w, r)
	problemBody(t, w, http.StatusBadRequest, "bad_request")
}
