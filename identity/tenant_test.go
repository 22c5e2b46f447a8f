package identity

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// tenantsReadAsAnother are tenants that an upstream would read as another
// tenant, "victim": HTTP parsers trim the white space around a header value
// (frameworks often every Unicode space), and a comma splits a header into
// a list. Each would keep quotas of its own while reaching the upstream as
// X-Quotagate-Tenant: victim.
var tenantsReadAsAnother = map[string]string{
	" victim":       "token tenant claim starts or ends with white space",
	"victim ":       "token tenant claim starts or ends with white space",
	"\tvictim":      "token has no valid tenant claim", // a control character: refused as before
	"victim\u00a0":  "token tenant claim starts or ends with white space",
	"\u3000victim":  "token tenant claim starts or ends with white space",
	"victim\u2003":  "token tenant claim starts or ends with white space",
	"\u0085victim":  "token tenant claim starts or ends with white space",
	"victim\ufeff":  "token tenant claim starts or ends with white space",
	"victim,x":      "token tenant claim contains a comma",
	",victim":       "token tenant claim contains a comma",
	"victim, other": "token tenant claim contains a comma",
}

// TestJWTTenantReadAsAnother: a JWT whose tenant claim an upstream would
// read as another tenant is refused with 401's reason naming why; tenants
// with inner spaces and other punctuation stay valid.
func TestJWTTenantReadAsAnother(t *testing.T) {
	a := mustNew(t, testConfig())
	auth := func(tenant string) (Caller, error) {
		tok := sign(t, jwt.SigningMethodHS256, testSecret, claims(func(c jwt.MapClaims) { c["sub"] = tenant }))
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		return a.Authenticate(r)
	}
	for tenant, reason := range tenantsReadAsAnother {
		c, err := auth(tenant)
		if !errors.Is(err, ErrUnauthenticated) || Reason(err) != reason {
			t.Errorf("tenant claim %q: %+v, %v; want reason %q", tenant, c, err, reason)
		}
	}
	for _, ok := range []string{"victim", "Acme Corp", "a:b;c", "société", "vic\u00a0tim", "{acme}"} {
		if c, err := auth(ok); err != nil || c.Tenant != ok {
			t.Errorf("tenant claim %q: %+v, %v; want it accepted as it is", ok, c, err)
		}
	}
}

// TestJWTTierClaimIsANameOrUnknown: the tier claim needs no rule of its own:
// it must name a configured tier, and tier names hold no white space or
// comma, so " free" or "free,enterprise" is an unknown tier.
func TestJWTTierClaimIsANameOrUnknown(t *testing.T) {
	a := mustNew(t, testConfig())
	for _, tier := range []string{" free", "free ", "free,enterprise", "free\u00a0"} {
		tok := sign(t, jwt.SigningMethodHS256, testSecret, claims(func(c jwt.MapClaims) { c["tier"] = tier }))
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		if _, err := a.Authenticate(r); Reason(err) != "unknown tier" {
			t.Errorf("tier claim %q: %v, want reason %q", tier, err, "unknown tier")
		}
	}
}

// TestAPIKeyTenantReadAsAnother: New refuses an API key whose tenant breaks
// the same rule (package config reports it with its field path first).
func TestAPIKeyTenantReadAsAnother(t *testing.T) {
	for tenant := range tenantsReadAsAnother {
		c := testConfig()
		c.APIKeys = append([]APIKey(nil), c.APIKeys...)
		c.APIKeys[1].Tenant = tenant
		want := "api_keys[1]: tenant must not start or end with white space"
		switch {
		case strings.Contains(tenant, "\t"):
			want = "api_keys[1]: tenant must not contain control characters"
		case strings.Contains(tenant, ","):
			want = "api_keys[1]: tenant must not contain a comma"
		}
		if _, err := New(c); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("api key tenant %q: %v, want an error containing %q", tenant, err, want)
		}
	}
}
