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
	token := func(f *fixture, sub string) map[string]string {
		t.Helper()
		claims := jwt.MapClaims{"sub": sub, "tier": "free", "exp": f.clock.Now().Add(time.Hour).Unix()}
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(jwtSecret))
		if err != nil {
			t.Fatal(err)
		}
		return bearer(s)
	}
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
