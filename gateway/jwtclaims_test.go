package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// jwtClaimsConfig is baseConfig accepting only tokens that the issuer
// https://id.example signed for the audience quotagate (or payments).
var jwtClaimsConfig = strings.Replace(baseConfig, "    secret_env: TEST_JWT_SECRET\n",
	"    secret_env: TEST_JWT_SECRET\n    issuers: [\"https://id.example\"]\n    audiences: [quotagate, payments]\n", 1)

// TestJWTClaimsOverHTTP sends tokens signed with the gateway's own secret,
// over a real connection, to a gateway configured with accepted issuers
// and audiences. A token the same issuer signed for another service, one
// from another issuer, one used before its nbf or iat, and one with a crit
// header are answered 401 unauthenticated with the reason, and the
// upstream never sees them, though each names the enterprise tier.
func TestJWTClaimsOverHTTP(t *testing.T) {
	f := newFixture(t, jwtClaimsConfig)
	pub, _, _ := f.serve(t)
	now := f.clock.Now()
	valid := func(change func(jwt.MapClaims)) jwt.MapClaims {
		c := jwt.MapClaims{"sub": "initech", "tier": "enterprise", "iss": "https://id.example", "aud": "quotagate",
			"exp": now.Add(time.Hour).Unix(), "iat": now.Unix()}
		if change != nil {
			change(c)
		}
		return c
	}
	for _, tc := range []struct {
		name   string
		claims jwt.MapClaims
		header map[string]any
		reason string // "" = accepted
	}{
		{name: "accepted", claims: valid(nil)},
		{name: "one accepted audience in a list", claims: valid(func(c jwt.MapClaims) { c["aud"] = []string{"billing", "payments"} })},
		{name: "nbf and iat within the clock skew", claims: valid(func(c jwt.MapClaims) {
			c["nbf"], c["iat"] = now.Add(4*time.Second).Unix(), now.Add(4*time.Second).Unix()
		})},
		{name: "another audience", claims: valid(func(c jwt.MapClaims) { c["aud"] = "billing" }), reason: "token audience not accepted"},
		{name: "no audience", claims: valid(func(c jwt.MapClaims) { delete(c, "aud") }), reason: "token audience not accepted"},
		{name: "another issuer", claims: valid(func(c jwt.MapClaims) { c["iss"] = "https://evil.example" }), reason: "token issuer not accepted"},
		{name: "no issuer", claims: valid(func(c jwt.MapClaims) { delete(c, "iss") }), reason: "token issuer not accepted"},
		{name: "nbf in the future", claims: valid(func(c jwt.MapClaims) { c["nbf"] = now.Add(time.Minute).Unix() }), reason: "token not yet valid"},
		{name: "iat in the future", claims: valid(func(c jwt.MapClaims) { c["iat"] = now.Add(time.Minute).Unix() }), reason: "token issued in the future"},
		{name: "crit header", claims: valid(nil), header: map[string]any{"crit": []string{"exp"}}, reason: "token has unsupported critical header parameters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.upstream.mu.Lock()
			f.upstream.last = nil
			f.upstream.mu.Unlock()
			w := getWithToken(t, pub+"/v1/open", signedToken(t, tc.claims, tc.header))
			up, _ := f.upstream.Last()
			if tc.reason == "" {
				if w.Code != http.StatusOK || up == nil || up.Header.Get("X-Quotagate-Tenant") != "initech" {
					t.Fatalf("status %d, upstream request %v: want 200 forwarded for initech; body %s", w.Code, up != nil, w.Body.String())
				}
				return
			}
			m := problemBody(t, w, http.StatusUnauthorized, "unauthenticated")
			if m["message"] != tc.reason {
				t.Errorf("message = %q, want %q", m["message"], tc.reason)
			}
			if w.Header().Get("Www-Authenticate") == "" || w.Header().Get("RateLimit") != "" {
				t.Errorf("headers %v: want WWW-Authenticate and no RateLimit", w.Header())
			}
			if up != nil {
				t.Error("a refused token reached the upstream")
			}
		})
	}
}

// TestJWTClaimsUncheckedByDefault: without issuers and audiences in the
// config, iss and aud are not looked at (as before they could be set), but
// a crit header is refused all the same.
func TestJWTClaimsUncheckedByDefault(t *testing.T) {
	f := newFixture(t, baseConfig)
	pub, _, _ := f.serve(t)
	claims := jwt.MapClaims{"sub": "initech", "tier": "free", "iss": "https://anyone.example", "aud": "billing",
		"exp": f.clock.Now().Add(time.Hour).Unix()}
	if w := getWithToken(t, pub+"/v1/open", signedToken(t, claims, nil)); w.Code != http.StatusOK {
		t.Fatalf("token with any iss and aud: %d %s, want 200", w.Code, w.Body.String())
	}
	w := getWithToken(t, pub+"/v1/open", signedToken(t, claims, map[string]any{"crit": []string{"b64"}, "b64": false}))
	if m := problemBody(t, w, http.StatusUnauthorized, "unauthenticated"); m["message"] != "token has unsupported critical header parameters" {
		t.Errorf("message = %q", m["message"])
	}
}

// signedToken signs claims with the gateway's secret (HS256), adding the
// header parameters of header.
func signedToken(t *testing.T, claims jwt.MapClaims, header map[string]any) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	for k, v := range header {
		tok.Header[k] = v
	}
	s, err := tok.SignedString([]byte(jwtSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// getWithToken sends GET url with the bearer token over a real connection
// and returns the answer as a recorder, for problemBody.
func getWithToken(t *testing.T, url, token string) *httptest.ResponseRecorder {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.Code = resp.StatusCode
	w.Body.Write(body)
	return w
}
