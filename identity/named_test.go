package identity

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestNamedIsTheCallerOfACredential: for each kind, Named gives the
// Caller (kind, tenant, tier, subject, id) that Authenticate gives a
// request of that tenant, with shared JWT and key tenants too.
func TestNamedIsTheCallerOfACredential(t *testing.T) {
	for _, share := range []bool{false, true} {
		c := testConfig()
		c.ShareKeyAndJWTTenants = share
		a := mustNew(t, c)
		auth := func(cred, remote string) Caller {
			t.Helper()
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = remote
			if cred != "" {
				r.Header.Set("Authorization", "Bearer "+cred)
			}
			got, err := a.Authenticate(r)
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		token := sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "initech", "tier": "free", "exp": testT0.Add(time.Hour).Unix()})
		cases := []struct {
			kind         Kind
			tenant, tier string
			want         Caller
		}{
			{KindAPIKey, "acme", "", auth(acmeKey, "192.0.2.1:1")},
			{KindAPIKey, "globex", "free", auth(globexKey, "192.0.2.1:1")},
			{KindJWT, "initech", "free", auth(token, "192.0.2.1:1")},
			{KindAnonymous, "203.0.113.7", "", auth("", "203.0.113.7:1")},
			{KindAnonymous, "ip:203.0.113.7", "anonymous", auth("", "203.0.113.7:1")},
			{KindAnonymous, "ip:2001:db8:1:2::/64", "", auth("", "[2001:db8:1:2:aaaa::1]:1")},
			{KindAnonymous, "::ffff:203.0.113.7", "", auth("", "203.0.113.7:1")},
		}
		for _, tc := range cases {
			got, err := a.Named(tc.kind, tc.tenant, tc.tier)
			if err != nil {
				t.Errorf("share=%v Named(%s, %q, %q): %v", share, tc.kind, tc.tenant, tc.tier, err)
				continue
			}
			want := tc.want
			if tc.kind != KindAnonymous {
				want.ClientIP = got.ClientIP // a named caller has no address
			}
			if got.ClientIP.IsValid() != (tc.kind == KindAnonymous) {
				t.Errorf("Named(%s, %q): ClientIP %v", tc.kind, tc.tenant, got.ClientIP)
			}
			if got.Kind != want.Kind || got.Tenant != want.Tenant || got.Tier != want.Tier || got.Subject != want.Subject || got.ID != want.ID {
				t.Errorf("share=%v Named(%s, %q, %q) = %+v, want %+v", share, tc.kind, tc.tenant, tc.tier, got, want)
			}
		}
	}
}

// TestNamedRefuses: what Named refuses, and which refusals are
// ErrUnknownTenant (the tenant is not one of that kind).
func TestNamedRefuses(t *testing.T) {
	c := testConfig()
	c.APIKeys = append(c.APIKeys, APIKey{SHA256Hex: HashKey("second-acme-key"), Tenant: "acme", Tier: "free"})
	a := mustNew(t, c)
	cases := []struct {
		kind          Kind
		tenant, tier  string
		unknown       bool
		wantInMessage string
	}{
		{KindAPIKey, "nobody", "", true, "nobody"},
		{KindAPIKey, "acme", "", false, "enterprise, free"},
		{KindAPIKey, "acme", "anonymous", false, "anonymous"},
		{KindJWT, "initech", "", false, "tier"},
		{KindJWT, "initech", "platinum", false, "platinum"},
		{KindJWT, " initech", "free", false, "white space"},
		{KindJWT, "a,b", "free", false, "comma"},
		{KindAnonymous, "not-an-address", "", true, "not-an-address"},
		{KindAnonymous, "203.0.113.7", "free", false, "anonymous"},
	}
	for _, tc := range cases {
		_, err := a.Named(tc.kind, tc.tenant, tc.tier)
		if err == nil || errors.Is(err, ErrUnknownTenant) != tc.unknown || !strings.Contains(err.Error(), tc.wantInMessage) {
			t.Errorf("Named(%s, %q, %q) = %v, want an error with %q (unknown tenant: %v)", tc.kind, tc.tenant, tc.tier, err, tc.wantInMessage, tc.unknown)
		}
	}
	// With the two acme keys told apart by tier, each is its tier.
	for _, tier := range []string{"enterprise", "free"} {
		if got, err := a.Named(KindAPIKey, "acme", tier); err != nil || got.Tier != tier || got.Subject != "key:acme" {
			t.Errorf("Named(api_key, acme, %s) = %+v, %v", tier, got, err)
		}
	}
	noJWT := testConfig()
	noJWT.JWT, noJWT.AnonymousTier = nil, ""
	b := mustNew(t, noJWT)
	if _, err := b.Named(KindJWT, "initech", "free"); err == nil || !strings.Contains(err.Error(), "identity.jwt") {
		t.Errorf("Named(jwt) without JWTs: %v", err)
	}
	if _, err := b.Named(KindAnonymous, "203.0.113.7", ""); err == nil || !strings.Contains(err.Error(), "identity.anonymous") {
		t.Errorf("Named(anonymous) without anonymous callers: %v", err)
	}
	// What is not an address is not an anonymous caller's, configured or not.
	if _, err := b.Named(KindAnonymous, "initech", ""); !errors.Is(err, ErrUnknownTenant) {
		t.Errorf("Named(anonymous, initech) without anonymous callers: %v, want ErrUnknownTenant", err)
	}
}
