package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestHostileTenantReadAsAnother runs the binary with JWTs and a tenant
// policy of one request per hour. "victim" spends its request; then JWTs
// whose tenant claim an upstream would read as "victim" (HTTP parsers trim
// the white space around X-Quotagate-Tenant, a comma splits it into a
// list) used to get quotas of their own and reach the upstream as
// X-Quotagate-Tenant: victim. They are answered 401 unauthenticated
// problem+json, the message naming why, and the upstream never sees them.
func TestHostileTenantReadAsAnother(t *testing.T) {
	up := startUpstream(t)
	cfg := limiterConfig(up.URL(), nil)
	cfg.Identity.JWT = &jwtCfg{SecretEnv: "E2E_JWT_SECRET"}
	cfg.Policies["tenant"] = policyCfg{Limits: map[string]limitCfg{"std": bucket(1, "1h", 1)}}
	cfg.route("ok.get", "GET", "/ok/{rest...}", 1, "tenant")
	gw := startGateway(t, "gw", cfg, withEnv("E2E_JWT_SECRET="+e2eJWTSecret))

	bearer := func(tenant string) string {
		tok := hs256(t, e2eJWTSecret, map[string]any{"sub": tenant, "tier": "std", "exp": time.Now().Add(time.Hour).Unix()})
		return "Authorization: Bearer " + tok + "\r\n"
	}
	if r := rawStatus(t, gw.Addr, get("/ok/victim", bearer("victim"))); r.status != http.StatusOK {
		t.Fatalf("victim's request: %d %s", r.status, truncate(r.body, 200))
	}
	const (
		space = "token tenant claim starts or ends with white space"
		comma = "token tenant claim contains a comma"
	)
	for i, c := range []struct{ tenant, message string }{
		{" victim", space},
		{"victim ", space},
		{"victim\t", "token has no valid tenant claim"},
		{"victim\u00a0", space},
		{"\u3000victim", space},
		{"victim,x", comma},
		{"victim, victim", comma},
	} {
		path := fmt.Sprintf("/ok/refused-%d", i)
		r := rawStatus(t, gw.Addr, get(path, bearer(c.tenant)))
		var p struct {
			Error, Message string
			Status         int
		}
		if r.status != http.StatusUnauthorized || r.header.Get("Content-Type") != "application/problem+json" ||
			json.Unmarshal([]byte(r.body), &p) != nil || p.Error != "unauthenticated" || p.Message != c.message || p.Status != 401 {
			t.Errorf("tenant claim %q: %d %s %s, want 401 problem+json unauthenticated %q",
				c.tenant, r.status, r.header.Get("Content-Type"), truncate(r.body, 200), c.message)
		}
		if r.header.Get("Www-Authenticate") == "" {
			t.Errorf("tenant claim %q: 401 without WWW-Authenticate", c.tenant)
		}
	}
	// A request is proxied before it is answered, so once the 401s are in
	// the upstream has seen all it will of them; a last request of another
	// tenant, waited for, shows that the upstream is reached at all.
	if r := rawStatus(t, gw.Addr, get("/ok/after", bearer("other"))); r.status != http.StatusOK {
		t.Fatalf("another tenant's request after the refusals: %d %s", r.status, truncate(r.body, 200))
	}
	waitSeen(t, up, "/ok/after")
	var tenants []string
	for _, r := range up.requests() {
		tenants = append(tenants, r.Path+" "+r.Tenant)
	}
	if want := []string{"/ok/victim victim", "/ok/after other"}; fmt.Sprint(tenants) != fmt.Sprint(want) {
		t.Errorf("the upstream saw %q, want %q (no refused request)", tenants, want)
	}
}
