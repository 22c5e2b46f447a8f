package gateway

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestCallerKindsDoNotShareBuckets sends, through the gateway to a real
// upstream, callers of different kinds whose tenant strings collide: a JWT
// whose tenant claim is the anonymous caller's "ip:" tenant, and a JWT
// naming an API key's tenant. Each kind has its own bucket unless the config
// links API keys and JWTs.
func TestCallerKindsDoNotShareBuckets(t *testing.T) {
	token := func(f *fixture, sub string) map[string]string { return tenantToken(t, f, sub) }
	// exhaust spends the burst of 5 of the "tenant" policy and checks the
	// sixth request is denied (for an anonymous caller, stage 1 of its tier
	// has the same burst and denies first).
	exhaust := func(t *testing.T, f *fixture, who string, hdr map[string]string) {
		t.Helper()
		for i := range 5 {
			if w := f.do("GET", "/v1/transfers/1", hdr, nil); w.Code != http.StatusOK {
				t.Fatalf("%s request %d: %d %s", who, i+1, w.Code, w.Body.String())
			}
		}
		problemBody(t, f.do("GET", "/v1/transfers/1", hdr, nil), http.StatusTooManyRequests, "rate_limited")
	}
	status := func(f *fixture, hdr map[string]string) int {
		return f.do("GET", "/v1/transfers/1", hdr, nil).Code
	}

	t.Run("anonymous and a JWT naming its address", func(t *testing.T) {
		f := newFixture(t, baseConfig)
		exhaust(t, f, "anonymous", nil) // fixture requests come from 192.0.2.10
		if got := status(f, token(f, "ip:192.0.2.10")); got != http.StatusOK {
			t.Fatalf("JWT with tenant ip:192.0.2.10 after the anonymous caller at 192.0.2.10 spent its burst: %d, want 200", got)
		}
	})

	t.Run("API key and JWT naming the same tenant", func(t *testing.T) {
		f := newFixture(t, baseConfig)
		exhaust(t, f, "API key of acme", bearer(freeKey))
		if got := status(f, token(f, "acme")); got != http.StatusOK {
			t.Fatalf("JWT of tenant acme after the API key of acme spent its burst: %d, want 200", got)
		}
	})

	t.Run("API key and JWT linked by config", func(t *testing.T) {
		shared := strings.Replace(baseConfig, "    secret_env: TEST_JWT_SECRET\n",
			"    secret_env: TEST_JWT_SECRET\n    share_tenants_with_api_keys: true\n", 1)
		f := newFixture(t, shared)
		exhaust(t, f, "API key of acme", bearer(freeKey))
		if got := status(f, token(f, "acme")); got != http.StatusTooManyRequests {
			t.Fatalf("JWT of tenant acme sharing with the API key of acme after it spent its burst: %d, want 429", got)
		}
		if got := status(f, nil); got != http.StatusOK {
			t.Fatalf("anonymous caller after acme spent its burst: %d, want 200", got)
		}
	})
}

// TestTenantClaimsCannotReachAnotherBucket: a JWT's tenant claim is hashed
// whole into the store key, so separators in it (':' as the key format
// uses, '{' '}' as Redis hash tags do) cannot land a caller in another
// tenant's bucket; a claim with NUL, CR LF or other control characters, or
// over 256 bytes, is refused (401) before it reaches a key, a header or a
// log; a long or non-ASCII one that passes reaches the upstream intact in
// X-Quotagate-Tenant.
func TestTenantClaimsCannotReachAnotherBucket(t *testing.T) {
	f := newFixture(t, baseConfig)
	token := func(sub string) map[string]string { return tenantToken(t, f, sub) }
	for i := range 5 {
		if w := f.do("GET", "/v1/transfers/1", token("a:b"), nil); w.Code != http.StatusOK {
			t.Fatalf("tenant a:b request %d: %d %s", i+1, w.Code, w.Body.String())
		}
	}
	problemBody(t, f.do("GET", "/v1/transfers/1", token("a:b"), nil), http.StatusTooManyRequests, "rate_limited")
	for _, other := range []string{"a", "b", "a:", ":b", "a:b:", "a:b:tenant", "a:b:tenant:tb", "{a:b}", "jwt:a:b", "A:B"} {
		if w := f.do("GET", "/v1/transfers/1", token(other), nil); w.Code != http.StatusOK {
			t.Errorf("tenant %q after tenant a:b spent its burst: %d, want 200 (its own bucket)", other, w.Code)
		}
	}

	// "a:b " would reach the upstream as a:b (HTTP parsers trim), and a
	// comma splits a header list: both are refused too.
	for _, bad := range []string{"a\x00b", "a\r\nX-Injected: 1", "a\tb", "\x7f", strings.Repeat("x", 257), "a:b ", " a:b", "a,b"} {
		w := f.do("GET", "/v1/transfers/2", token(bad), nil)
		body := problemBody(t, w, http.StatusUnauthorized, "unauthenticated")
		if w.Header().Get("X-Injected") != "" || strings.Contains(w.Body.String(), bad) {
			t.Errorf("tenant %q: the refusal repeats it: %v", bad, body)
		}
	}
	for _, good := range []string{strings.Repeat("x", 256), "zürich\u202eroot"} {
		if w := f.do("GET", "/v1/transfers/3", token(good), nil); w.Code != http.StatusOK {
			t.Fatalf("tenant %q: %d %s, want 200", good, w.Code, w.Body.String())
		}
		if r, _ := f.upstream.Last(); r.Header.Values("X-Quotagate-Tenant")[0] != good || len(r.Header.Values("X-Quotagate-Tenant")) != 1 {
			t.Errorf("upstream got X-Quotagate-Tenant %q, want %q", r.Header.Values("X-Quotagate-Tenant"), good)
		}
	}
}

// tenantToken returns the Authorization header of a JWT of tenant sub, tier
// free, valid for an hour on f's clock.
func tenantToken(t *testing.T, f *fixture, sub string) map[string]string {
	t.Helper()
	claims := jwt.MapClaims{"sub": sub, "tier": "free", "exp": f.clock.Now().Add(time.Hour).Unix()}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(jwtSecret))
	if err != nil {
		t.Fatal(err)
	}
	return bearer(s)
}
