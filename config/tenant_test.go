package config

import (
	"fmt"
	"strings"
	"testing"
)

// TestAPIKeyTenantReadAsAnother: an API key's tenant that the upstream
// would read as another tenant in X-Quotagate-Tenant (white space at an end,
// which HTTP parsers trim; a comma, which splits a header into a list) fails
// Validate with its field path and the problem.
func TestAPIKeyTenantReadAsAnother(t *testing.T) {
	config := func(tenant string) string {
		return fmt.Sprintf(`
identity:
  api_keys:
    - {key_sha256: 9f8cfdb17116bf0e2a44e071454f25594cb9b8737bf331e6a2f0b30550572f29, tenant: victim, tier: free}
    - {key_sha256: 2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae, tenant: %q, tier: free}
tiers: {free: {}}
upstreams: {app: {url: "echo:"}}
routes: [{name: r, method: GET, path: /, upstream: app}]
`, tenant)
	}
	const (
		space = "identity.api_keys[1].tenant: must not start or end with white space (a space, a tab or any Unicode space)"
		comma = "identity.api_keys[1].tenant: must not contain a comma: it splits the header X-Quotagate-Tenant into a list, and the upstream would read another tenant"
	)
	for tenant, want := range map[string]string{
		" victim":      space,
		"victim ":      space,
		"victim\u00a0": space,
		"\u2003victim": space,
		"\u3000victim": space,
		"victim\ufeff": space,
		"victim,x":     comma,
		",victim":      comma,
		"a, b":         comma,
		"\tvictim":     "identity.api_keys[1].tenant: must be 1 to 256 bytes without control characters",
	} {
		if _, err := Parse([]byte(config(tenant)), noEnv); err == nil || err.Error() != want {
			t.Errorf("tenant %q: %v, want %q", tenant, err, want)
		}
	}
	for _, ok := range []string{"Acme Corp", "vic\u00a0tim", "a;b", "société", "{acme}"} {
		if _, err := Parse([]byte(config(ok)), noEnv); err != nil {
			t.Errorf("tenant %q: %v, want it accepted", ok, err)
		}
	}
}

// TestJWTValuesWithEdgeSpace: the issuers and audiences share the tenants'
// check: white space at an end is refused (no token's claim is meant to
// carry it), a comma is not (they are compared, never sent in a header).
func TestJWTValuesWithEdgeSpace(t *testing.T) {
	const cfg = `
identity:
  jwt:
    secret_env: JWT_SECRET
    issuers: ["https://id.example ", "https://id.example/a,b"]
    audiences: ["\u00a0billing", "billing"]
tiers: {free: {}}
upstreams: {app: {url: "echo:"}}
routes: [{name: r, method: GET, path: /, upstream: app}]
`
	getenv := func(name string) (string, bool) {
		if name == "JWT_SECRET" {
			return strings.Repeat("s", 32), true
		}
		return "", false
	}
	_, err := Parse([]byte(cfg), getenv)
	want := "identity.jwt.audiences[0]: must not start or end with white space (a space, a tab or any Unicode space)\n" +
		"identity.jwt.issuers[0]: must not start or end with white space (a space, a tab or any Unicode space)"
	if err == nil || err.Error() != want {
		t.Fatalf("Parse: %v, want\n%s", err, want)
	}
}
