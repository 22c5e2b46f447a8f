package e2e

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

const e2eJWTSecret = "e2e-jwt-secret-0123456789abcdef0123456789"

// hs256 returns a compact HS256 JWT of claims signed with secret.
func hs256(t *testing.T, secret string, claims map[string]any) string {
	t.Helper()
	enc := base64.RawURLEncoding
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	signing := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + enc.EncodeToString(payload)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(signing))
	return signing + "." + enc.EncodeToString(mac.Sum(nil))
}

// TestCallerKindsApart runs the binary with API keys, JWTs and anonymous
// callers in one tier and a tenant policy of 3 requests per hour. Callers of
// different kinds whose tenant strings collide keep separate buckets: a JWT
// whose tenant claim is the anonymous caller's "ip:127.0.0.1", and a JWT
// naming the API key's tenant "acme".
func TestCallerKindsApart(t *testing.T) {
	up := startUpstream(t)
	cfg := limiterConfig(up.URL(), nil, "acme")
	cfg.Identity.JWT = &jwtCfg{SecretEnv: "E2E_JWT_SECRET"}
	cfg.Identity.Anonymous = &anonCfg{Tier: "std"}
	cfg.Policies["tenant"] = policyCfg{Limits: map[string]limitCfg{"std": bucket(1, "1h", 3)}}
	cfg.route("ok.get", "GET", "/ok/{rest...}", 1, "tenant")
	gw := startGateway(t, "gw", cfg, withEnv("E2E_JWT_SECRET="+e2eJWTSecret))

	jwtOf := func(sub string) string {
		tok := hs256(t, e2eJWTSecret, map[string]any{"sub": sub, "tier": "std", "exp": time.Now().Add(time.Hour).Unix()})
		return "Authorization: Bearer " + tok + "\r\n"
	}
	status := func(header string) int { return rawStatus(t, gw.Addr, get("/ok/x", header)).status }
	spend := func(who, header string) {
		t.Helper()
		for i := range 3 {
			if s := status(header); s != http.StatusOK {
				t.Fatalf("%s request %d: %d, want 200", who, i+1, s)
			}
		}
		if s := status(header); s != http.StatusTooManyRequests {
			t.Fatalf("%s request 4: %d, want 429", who, s)
		}
	}

	spend("anonymous caller at 127.0.0.1", "")
	if s := status(jwtOf("ip:127.0.0.1")); s != http.StatusOK {
		t.Errorf("JWT with tenant ip:127.0.0.1 after the anonymous caller at 127.0.0.1 spent its bucket: %d, want 200", s)
	}
	spend("API key of acme", "X-API-Key: key-acme\r\n")
	if s := status(jwtOf("acme")); s != http.StatusOK {
		t.Errorf("JWT with tenant acme after the API key of acme spent its bucket: %d, want 200", s)
	}
	var tenants []string
	for _, r := range up.requests() {
		tenants = append(tenants, r.Tenant)
	}
	want := []string{"", "", "", "ip:127.0.0.1", "acme", "acme", "acme", "acme"}
	if len(tenants) != len(want) {
		t.Fatalf("the upstream saw tenants %q, want %q", tenants, want)
	}
	for i := range want {
		if tenants[i] != want[i] {
			t.Fatalf("the upstream saw tenants %q, want %q (X-Quotagate-Tenant stays the bare tenant)", tenants, want)
		}
	}
}

// TestAnonymousIPv6Prefix runs the binary behind a trusted proxy (the
// test, at 127.0.0.1) with anonymous callers grouped by IPv6 /48 and a
// tenant policy of one request per hour. A holder of a /48, which a tunnel
// broker hands out for free, used to be 65,536 anonymous callers (one per
// /64); with ipv6_prefix: 48 all its addresses share one bucket, another
// /48 has its own, and IPv4 callers are still one per address.
func TestAnonymousIPv6Prefix(t *testing.T) {
	up := startUpstream(t)
	cfg := limiterConfig(up.URL(), nil)
	cfg.Server.TrustedProxies = []string{"127.0.0.1/32"}
	cfg.Identity.Anonymous = &anonCfg{Tier: "std", IPv6Prefix: 48}
	cfg.Policies["tenant"] = policyCfg{Limits: map[string]limitCfg{"std": bucket(1, "1h", 1)}}
	cfg.route("ok.get", "GET", "/ok/{rest...}", 1, "tenant")
	gw := startGateway(t, "gw", cfg)

	for _, c := range []struct {
		client string
		want   int
	}{
		{"2001:db8:1:1::5", http.StatusOK},
		{"2001:db8:1:2::5", http.StatusTooManyRequests}, // another /64 of the same /48
		{"2001:db8:1:ffff:1:2:3:4", http.StatusTooManyRequests},
		{"[2001:db8:1:3::9]:4711", http.StatusTooManyRequests},
		{"2001:db8:2:1::5", http.StatusOK}, // another /48
		{"192.0.2.1", http.StatusOK},
		{"192.0.2.2", http.StatusOK},
		{"::ffff:192.0.2.2", http.StatusTooManyRequests}, // 192.0.2.2 again
	} {
		r := rawStatus(t, gw.Addr, get("/ok/x", "X-Forwarded-For: "+c.client+"\r\n"))
		if r.status != c.want {
			t.Errorf("anonymous caller at %s: %d %s, want %d", c.client, r.status, truncate(r.body, 120), c.want)
		}
	}
}
