package identity

import (
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var (
	testT0     = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	testSecret = []byte("0123456789abcdef0123456789abcdef-test")
	testTiers  = map[string]bool{"anonymous": true, "free": true, "enterprise": true}
)

const (
	acmeKey   = "qg_live_acme_4f1c2d"
	globexKey = "qg_live_globex_99aa"
)

func testConfig() Config {
	return Config{
		APIKeys: []APIKey{
			{SHA256Hex: HashKey(acmeKey), Tenant: "acme", Tier: "enterprise"},
			{SHA256Hex: strings.ToUpper(HashKey(globexKey)), Tenant: "globex", Tier: "free"},
		},
		JWT:            &JWTConfig{Secret: testSecret, TenantClaim: "sub", TierClaim: "tier", Leeway: 5 * time.Second},
		AnonymousTier:  "anonymous",
		Tiers:          testTiers,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		Now:            func() time.Time { return testT0 },
	}
}

func mustNew(t testing.TB, c Config) *Authenticator {
	t.Helper()
	a, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func sign(t testing.TB, m jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(m, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// claims returns valid claims for tenant initech, tier free, with changes.
func claims(change func(jwt.MapClaims)) jwt.MapClaims {
	c := jwt.MapClaims{"sub": "initech", "tier": "free", "exp": testT0.Add(time.Hour).Unix(), "iat": testT0.Unix()}
	if change != nil {
		change(c)
	}
	return c
}

// signHeader signs claims with HS256 and the test secret, with extra header
// parameters.
func signHeader(t testing.TB, claims jwt.MapClaims, header map[string]any) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	for k, v := range header {
		tok.Header[k] = v
	}
	s, err := tok.SignedString(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func TestAuthenticate(t *testing.T) {
	valid := sign(t, jwt.SigningMethodHS256, testSecret, claims(nil))
	none := sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims(nil))
	hs512 := sign(t, jwt.SigningMethodHS512, testSecret, claims(nil))
	rs256 := b64(`{"alg":"RS256","typ":"JWT"}`) + "." + strings.Split(valid, ".")[1] + "." + b64("not-a-signature")
	hs := func(change func(jwt.MapClaims)) string {
		return sign(t, jwt.SigningMethodHS256, testSecret, claims(change))
	}

	type want struct {
		kind         Kind
		tenant, tier string
		reason       string // "" = success
	}
	for _, tc := range []struct {
		name    string
		authz   []string
		apiKey  []string
		noAnon  bool
		noJWT   bool
		want    want
		comment string
	}{
		{name: "no credential is anonymous", want: want{KindAnonymous, "ip:203.0.113.7", "anonymous", ""}},
		{name: "no credential without anonymous tier", noAnon: true, want: want{reason: "missing credential"}},
		{name: "bearer api key", authz: []string{"Bearer " + acmeKey}, want: want{KindAPIKey, "acme", "enterprise", ""}},
		{name: "scheme is case-insensitive", authz: []string{"bearer " + globexKey}, want: want{KindAPIKey, "globex", "free", ""}},
		{name: "X-API-Key", apiKey: []string{globexKey}, want: want{KindAPIKey, "globex", "free", ""}},
		{name: "both headers agreeing", authz: []string{"Bearer " + acmeKey}, apiKey: []string{acmeKey}, want: want{KindAPIKey, "acme", "enterprise", ""}},
		{name: "both headers differing", authz: []string{"Bearer " + acmeKey}, apiKey: []string{globexKey}, want: want{reason: "conflicting credentials"}},
		{name: "unknown bearer key", authz: []string{"Bearer qg_live_nobody"}, want: want{reason: "unknown api key"}},
		{name: "unknown X-API-Key", apiKey: []string{"qg_live_nobody"}, noAnon: false, want: want{reason: "unknown api key"}},
		{name: "empty bearer", authz: []string{"Bearer "}, want: want{reason: "empty credential"}},
		{name: "bare scheme", authz: []string{"Bearer"}, want: want{reason: "empty credential"}},
		{name: "empty Authorization", authz: []string{""}, want: want{reason: "malformed authorization header"}},
		{name: "empty X-API-Key", apiKey: []string{""}, want: want{reason: "empty credential"}},
		{name: "basic scheme", authz: []string{"Basic dXNlcjpwYXNz"}, want: want{reason: "unsupported authorization scheme"}},
		{name: "multiple Authorization", authz: []string{"Bearer " + acmeKey, "Bearer " + acmeKey}, want: want{reason: "multiple credential headers"}},
		{name: "multiple X-API-Key", apiKey: []string{acmeKey, acmeKey}, want: want{reason: "multiple credential headers"}},
		{name: "oversized", authz: []string{"Bearer " + strings.Repeat("k", MaxCredentialBytes+1)}, want: want{reason: "credential too long"}},
		{name: "largest size is looked up", authz: []string{"Bearer " + strings.Repeat("k", MaxCredentialBytes)}, want: want{reason: "unknown api key"}},
		{name: "control character", authz: []string{"Bearer " + acmeKey + "\x01"}, want: want{reason: "credential contains invalid characters"}},
		{name: "inner space", apiKey: []string{"qg live"}, want: want{reason: "credential contains invalid characters"}},
		{name: "non-ASCII", apiKey: []string{acmeKey + "é"}, want: want{reason: "credential contains invalid characters"}},
		{name: "jwt", authz: []string{"Bearer " + valid}, want: want{KindJWT, "initech", "free", ""}},
		{name: "jwt alg none", authz: []string{"Bearer " + none}, want: want{reason: "unknown api key"}}, // "h.p." is no JWT shape
		{name: "jwt alg none with a signature", authz: []string{"Bearer " + none + b64("sig")}, want: want{reason: "unsupported token algorithm"}},
		{name: "jwt RS256 header", authz: []string{"Bearer " + rs256}, want: want{reason: "unsupported token algorithm"}},
		{name: "jwt HS512", authz: []string{"Bearer " + hs512}, want: want{reason: "unsupported token algorithm"}},
		{name: "jwt wrong secret", authz: []string{"Bearer " + sign(t, jwt.SigningMethodHS256, []byte("another-secret-of-32-bytes-or-more!"), claims(nil))}, want: want{reason: "invalid token signature"}},
		{name: "jwt tampered payload", authz: []string{"Bearer " + strings.Replace(valid, strings.Split(valid, ".")[1], strings.Split(hs(func(c jwt.MapClaims) { c["tier"] = "enterprise" }), ".")[1], 1)}, want: want{reason: "invalid token signature"}},
		{name: "jwt expired", authz: []string{"Bearer " + hs(func(c jwt.MapClaims) { c["exp"] = testT0.Add(-time.Minute).Unix() })}, want: want{reason: "token expired"}},
		{name: "jwt expired within leeway", authz: []string{"Bearer " + hs(func(c jwt.MapClaims) { c["exp"] = testT0.Add(-2 * time.Second).Unix() })}, want: want{KindJWT, "initech", "free", ""}},
		{name: "jwt without exp", authz: []string{"Bearer " + hs(func(c jwt.MapClaims) { delete(c, "exp") })}, want: want{reason: "token has no expiry"}},
		{name: "jwt nbf in the future", authz: []string{"Bearer " + hs(func(c jwt.MapClaims) { c["nbf"] = testT0.Add(time.Minute).Unix() })}, want: want{reason: "token not yet valid"}},
		{name: "jwt nbf within leeway", authz: []string{"Bearer " + hs(func(c jwt.MapClaims) { c["nbf"] = testT0.Add(2 * time.Second).Unix() })}, want: want{KindJWT, "initech", "free", ""}},
		{name: "jwt iat in the future", authz: []string{"Bearer " + hs(func(c jwt.MapClaims) { c["iat"] = testT0.Add(time.Minute).Unix() })}, want: want{reason: "token issued in the future"}},
		{name: "jwt iat within leeway", authz: []string{"Bearer " + hs(func(c jwt.MapClaims) { c["iat"] = testT0.Add(2 * time.Second).Unix() })}, want: want{KindJWT, "initech", "free", ""}},
		// A time claim must be a JSON number (a NumericDate): one of another
		// type is refused, not ignored, whether or not it would pass as a
		// number.
		{name: "jwt iat a string", authz: []string{"Bearer " + hs(func(c jwt.MapClaims) { c["iat"] = strconv.FormatInt(testT0.Unix(), 10) })}, want: want{reason: "invalid token"}},
		{name: "jwt iat a boolean", authz: []string{"Bearer " + hs(func(c jwt.MapClaims) { c["iat"] = true })}, want: want{reason: "invalid token"}},
		{name: "jwt iat null", authz: []string{"Bearer " + hs(func(c jwt.MapClaims) { c["iat"] = nil })}, want: want{reason: "invalid token"}},
		{name: "jwt nbf a string", authz: []string{"Bearer " + hs(func(c jwt.MapClaims) { c["nbf"] = strconv.FormatInt(testT0.Unix(), 10) })}, want: want{reason: "invalid token"}},
		{name: "jwt exp a string", authz: []string{"Bearer " + hs(func(c jwt.MapClaims) { c["exp"] = strconv.FormatInt(testT0.Add(time.Hour).Unix(), 10) })}, want: want{reason: "invalid token"}},
		{name: "jwt with crit", authz: []string{"Bearer " + signHeader(t, claims(nil), map[string]any{"crit": []string{"exp"}})}, want: want{reason: "token has unsupported critical header parameters"}},
		{name: "jwt with empty crit", authz: []string{"Bearer " + signHeader(t, claims(nil), map[string]any{"crit": []string{}})}, want: want{reason: "token has unsupported critical header parameters"}},
		{name: "jwt with the b64 extension", authz: []string{"Bearer " + signHeader(t, claims(nil), map[string]any{"b64": false, "crit": []string{"b64"}})}, want: want{reason: "token has unsupported critical header parameters"}},
		{name: "jwt with iss and aud when neither is configured", authz: []string{"Bearer " + hs(func(c jwt.MapClaims) { c["iss"], c["aud"] = "https://other.example", "billing" })}, want: want{KindJWT, "initech", "free", ""}},
		{name: "jwt nbf in the past", authz: []string{"Bearer " + hs(func(c jwt.MapClaims) { c["nbf"] = testT0.Add(-time.Minute).Unix() })}, want: want{KindJWT, "initech", "free", ""}},
		{name: "jwt without tenant", authz: []string{"Bearer " + hs(func(c jwt.MapClaims) { delete(c, "sub") })}, want: want{reason: "token has no valid tenant claim"}},
		{name: "jwt with empty tenant", authz: []string{"Bearer " + hs(func(c jwt.MapClaims) { c["sub"] = "" })}, want: want{reason: "token has no valid tenant claim"}},
		{name: "jwt without tier", authz: []string{"Bearer " + hs(func(c jwt.MapClaims) { delete(c, "tier") })}, want: want{reason: "token has no valid tier claim"}},
		{name: "jwt with numeric tier", authz: []string{"Bearer " + hs(func(c jwt.MapClaims) { c["tier"] = 3 })}, want: want{reason: "token has no valid tier claim"}},
		{name: "jwt with unknown tier", authz: []string{"Bearer " + hs(func(c jwt.MapClaims) { c["tier"] = "platinum" })}, want: want{reason: "unknown tier"}},
		{name: "jwt-shaped garbage", authz: []string{"Bearer aaaa.bbbb.cccc"}, want: want{reason: "malformed token"}},
		{name: "jwt in X-API-Key is a key", apiKey: []string{valid}, want: want{reason: "unknown api key"}},
		{name: "jwt when jwt is off", authz: []string{"Bearer " + valid}, noJWT: true, want: want{reason: "unknown api key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig()
			if tc.noAnon {
				c.AnonymousTier = ""
			}
			if tc.noJWT {
				c.JWT = nil
			}
			a := mustNew(t, c)
			r := httptest.NewRequest(http.MethodGet, "/v1/x", nil)
			r.RemoteAddr = "203.0.113.7:51234"
			r.Header["Authorization"] = tc.authz
			r.Header["X-Api-Key"] = tc.apiKey
			got, err := a.Authenticate(r)
			if tc.want.reason != "" {
				if !errors.Is(err, ErrUnauthenticated) || Reason(err) != tc.want.reason {
					t.Fatalf("Authenticate = %+v, %v; want reason %q", got, err, tc.want.reason)
				}
				if got != (Caller{}) {
					t.Fatalf("caller %+v returned with an error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Authenticate: %v", err)
			}
			if got.Kind != tc.want.kind || got.Tenant != tc.want.tenant || got.Tier != tc.want.tier {
				t.Fatalf("caller = %+v, want %v %q %q", got, tc.want.kind, tc.want.tenant, tc.want.tier)
			}
			if got.ID != callerID(tc.want.kind, tc.want.tenant) || !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(got.ID) {
				t.Fatalf("ID = %q", got.ID)
			}
			if got.ClientIP != netip.MustParseAddr("203.0.113.7") {
				t.Fatalf("ClientIP = %v", got.ClientIP)
			}
		})
	}
}

func TestCallerIDs(t *testing.T) {
	// Known value: the first 8 bytes of SHA-256("api_key:acme").
	if got, want := callerID(KindAPIKey, "acme"), HashKey("api_key:acme")[:16]; got != want {
		t.Fatalf("callerID = %q, want %q", got, want)
	}
	if callerID(KindAPIKey, "acme") == callerID(KindJWT, "acme") {
		t.Fatal("kinds share an ID")
	}
	if got := HashKey("test"); got != "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" {
		t.Fatalf("HashKey(test) = %s", got)
	}
	for k, s := range map[Kind]string{KindAnonymous: "anonymous", KindAPIKey: "api_key", KindJWT: "jwt", 9: "Kind(9)"} {
		if k.String() != s {
			t.Fatalf("%d.String() = %q, want %q", k, k.String(), s)
		}
	}
}

// TestJWTIssuerAndAudience: with accepted issuers and audiences
// configured, a token signed with the same secret for another service, or
// by another issuer, or without the claims, is refused; with them unset,
// neither claim is looked at (see the table of TestAuthenticate).
func TestJWTIssuerAndAudience(t *testing.T) {
	c := testConfig()
	c.JWT.Issuers = []string{"https://id.example", "https://id2.example"}
	c.JWT.Audiences = []string{"quotagate", "payments"}
	a := mustNew(t, c)
	for _, tc := range []struct {
		name   string
		set    jwt.MapClaims // added to the valid claims; a nil value deletes
		reason string
	}{
		{"accepted", jwt.MapClaims{"iss": "https://id.example", "aud": "payments"}, ""},
		{"second issuer, audience in a list", jwt.MapClaims{"iss": "https://id2.example", "aud": []string{"billing", "quotagate"}}, ""},
		{"other audience", jwt.MapClaims{"iss": "https://id.example", "aud": "billing"}, "token audience not accepted"},
		{"other audiences in a list", jwt.MapClaims{"iss": "https://id.example", "aud": []string{"billing", "crm"}}, "token audience not accepted"},
		{"empty audience list", jwt.MapClaims{"iss": "https://id.example", "aud": []string{}}, "token audience not accepted"},
		{"no audience", jwt.MapClaims{"iss": "https://id.example"}, "token audience not accepted"},
		{"numeric audience", jwt.MapClaims{"iss": "https://id.example", "aud": 7}, "token audience not accepted"},
		{"audience differing in case", jwt.MapClaims{"iss": "https://id.example", "aud": "Quotagate"}, "token audience not accepted"},
		{"other issuer", jwt.MapClaims{"iss": "https://evil.example", "aud": "quotagate"}, "token issuer not accepted"},
		{"issuer with a trailing slash", jwt.MapClaims{"iss": "https://id.example/", "aud": "quotagate"}, "token issuer not accepted"},
		{"no issuer", jwt.MapClaims{"aud": "quotagate"}, "token issuer not accepted"},
		{"empty issuer", jwt.MapClaims{"iss": "", "aud": "quotagate"}, "token issuer not accepted"},
		{"issuer in a list", jwt.MapClaims{"iss": []string{"https://id.example"}, "aud": "quotagate"}, "token issuer not accepted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := sign(t, jwt.SigningMethodHS256, testSecret, claims(func(c jwt.MapClaims) {
				for k, v := range tc.set {
					c[k] = v
				}
			}))
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Header.Set("Authorization", "Bearer "+tok)
			got, err := a.Authenticate(r)
			if Reason(err) != tc.reason {
				t.Fatalf("Authenticate = %+v, %v; want reason %q", got, err, tc.reason)
			}
			if tc.reason == "" && (got.Kind != KindJWT || got.Tenant != "initech") {
				t.Fatalf("caller = %+v", got)
			}
		})
	}
}

func TestJWTClockIsInjected(t *testing.T) {
	now := testT0
	c := testConfig()
	c.Now = func() time.Time { return now }
	c.JWT.Leeway = time.Nanosecond
	a := mustNew(t, c)
	tok := sign(t, jwt.SigningMethodHS256, testSecret, claims(func(c jwt.MapClaims) { c["exp"] = testT0.Add(time.Minute).Unix() }))
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	for _, step := range []struct {
		at     time.Time
		reason string
	}{
		{testT0, ""},
		{testT0.Add(59 * time.Second), ""},
		{testT0.Add(61 * time.Second), "token expired"},
	} {
		now = step.at
		_, err := a.Authenticate(r)
		if Reason(err) != step.reason {
			t.Fatalf("at t0+%v: %v, want reason %q", step.at.Sub(testT0), err, step.reason)
		}
	}
}

// TestJWTZeroLeeway: a Leeway of 0 tolerates no skew: a token is expired
// from the second of its exp, and one whose nbf or iat is a second ahead
// is refused. Before, 0 meant the default 5s, so identity.jwt.clock_skew:
// 0s could not turn the leeway off.
func TestJWTZeroLeeway(t *testing.T) {
	c := testConfig()
	jc := *c.JWT
	jc.Leeway = 0
	c.JWT = &jc
	a := mustNew(t, c)
	for _, tc := range []struct {
		name   string
		change func(jwt.MapClaims)
		reason string // "" = accepted
	}{
		{"exp a second ahead", func(c jwt.MapClaims) { c["exp"] = testT0.Add(time.Second).Unix() }, ""},
		{"exp a second ago", func(c jwt.MapClaims) { c["exp"] = testT0.Add(-time.Second).Unix() }, "token expired"},
		{"nbf now", func(c jwt.MapClaims) { c["nbf"] = testT0.Unix() }, ""},
		{"nbf a second ahead", func(c jwt.MapClaims) { c["nbf"] = testT0.Add(time.Second).Unix() }, "token not yet valid"},
		{"iat a second ahead", func(c jwt.MapClaims) { c["iat"] = testT0.Add(time.Second).Unix() }, "token issued in the future"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("Authorization", "Bearer "+sign(t, jwt.SigningMethodHS256, testSecret, claims(tc.change)))
		if _, err := a.Authenticate(r); Reason(err) != tc.reason {
			t.Errorf("%s: %v, want reason %q", tc.name, err, tc.reason)
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"short hash", func(c *Config) { c.APIKeys[0].SHA256Hex = "abcd" }, "api_keys[0]: key_sha256 must be 64 hex characters"},
		{"non-hex hash", func(c *Config) { c.APIKeys[0].SHA256Hex = strings.Repeat("zz", 32) }, "api_keys[0]: key_sha256 must be 64 hex characters"},
		{"long hash", func(c *Config) { c.APIKeys[0].SHA256Hex += "00" }, "api_keys[0]: key_sha256 must be 64 hex characters"},
		{"duplicate", func(c *Config) { c.APIKeys[1].SHA256Hex = c.APIKeys[0].SHA256Hex }, "api_keys[1]: duplicate key_sha256"},
		{"empty tenant", func(c *Config) { c.APIKeys[0].Tenant = "" }, "api_keys[0]: tenant must not be empty"},
		{"unknown key tier", func(c *Config) { c.APIKeys[1].Tier = "gold" }, `api_keys[1]: unknown tier "gold"`},
		{"unknown anonymous tier", func(c *Config) { c.AnonymousTier = "guest" }, `anonymous: unknown tier "guest"`},
		{"short secret", func(c *Config) { c.JWT.Secret = []byte("secret") }, "jwt: secret must be at least 32 bytes"},
		{"negative leeway", func(c *Config) { c.JWT.Leeway = -time.Second }, "jwt: leeway must not be negative"},
		{"jwt without tiers", func(c *Config) { c.Tiers = nil }, "jwt: the known tiers must be given"},
		{"empty issuer", func(c *Config) { c.JWT.Issuers = []string{"https://id.example", ""} }, "jwt: issuers[1] must not be empty"},
		{"empty audience", func(c *Config) { c.JWT.Audiences = []string{""} }, "jwt: audiences[0] must not be empty"},
		{"invalid prefix", func(c *Config) { c.TrustedProxies = append(c.TrustedProxies, netip.Prefix{}) }, "trusted_proxies[1]: invalid prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig()
			c.APIKeys = append([]APIKey(nil), c.APIKeys...)
			jc := *c.JWT
			c.JWT = &jc
			tc.change(&c)
			_, err := New(c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// Without JWT, tiers may be left unchecked.
	c := testConfig()
	c.JWT, c.Tiers = nil, nil
	if _, err := New(c); err != nil {
		t.Fatalf("New without JWT and tiers: %v", err)
	}
}

// TestSubjectNamespaces checks that callers of different kinds naming the
// same tenant string never share a subject, unless API keys and JWTs are
// configured to share.
func TestSubjectNamespaces(t *testing.T) {
	const ip = "127.0.0.77"
	jwtAs := func(tenant string) string {
		return "Bearer " + sign(t, jwt.SigningMethodHS256, testSecret, claims(func(c jwt.MapClaims) { c["sub"] = tenant }))
	}
	subjects := func(share bool) map[string]string {
		c := testConfig()
		c.APIKeys = append(c.APIKeys,
			APIKey{SHA256Hex: HashKey("key-as-ip"), Tenant: "ip:" + ip, Tier: "free"},
			APIKey{SHA256Hex: HashKey("key-as-jwt"), Tenant: "jwt:initech", Tier: "free"},
			APIKey{SHA256Hex: HashKey("key-as-initech"), Tenant: "initech", Tier: "free"},
		)
		c.ShareKeyAndJWTTenants = share
		a := mustNew(t, c)
		out := map[string]string{}
		for name, authz := range map[string]string{
			"anonymous":       "",
			"jwt ip:":         jwtAs("ip:" + ip),
			"jwt initech":     jwtAs("initech"),
			"jwt key:initech": jwtAs("key:initech"),
			"jwt tenant:x":    jwtAs("tenant:initech"),
			"key ip:":         "Bearer key-as-ip",
			"key jwt:initech": "Bearer key-as-jwt",
			"key initech":     "Bearer key-as-initech",
		} {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = ip + ":5000"
			if authz != "" {
				r.Header.Set("Authorization", authz)
			}
			c, err := a.Authenticate(r)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if c.Subject == "" {
				t.Fatalf("%s: empty subject", name)
			}
			out[name] = c.Subject
		}
		return out
	}

	apart := subjects(false)
	want := map[string]string{
		"anonymous":       "ip:" + ip,
		"jwt ip:":         "jwt:ip:" + ip,
		"jwt initech":     "jwt:initech",
		"jwt key:initech": "jwt:key:initech",
		"jwt tenant:x":    "jwt:tenant:initech",
		"key ip:":         "key:ip:" + ip,
		"key jwt:initech": "key:jwt:initech",
		"key initech":     "key:initech",
	}
	for name, s := range want {
		if apart[name] != s {
			t.Errorf("apart: %s: subject %q, want %q", name, apart[name], s)
		}
	}
	seen := map[string]string{}
	for name, s := range apart {
		if other, dup := seen[s]; dup {
			t.Errorf("apart: %s and %s share the subject %q", name, other, s)
		}
		seen[s] = name
	}

	shared := subjects(true)
	if shared["key initech"] != shared["jwt initech"] || shared["key initech"] != "tenant:initech" {
		t.Errorf("shared: key %q and jwt %q of tenant initech, want both %q", shared["key initech"], shared["jwt initech"], "tenant:initech")
	}
	if shared["anonymous"] == shared["jwt ip:"] || shared["anonymous"] == shared["key ip:"] {
		t.Errorf("shared: an anonymous caller shares with a credential: %v", shared)
	}
	if shared["jwt tenant:x"] == shared["key initech"] {
		t.Errorf("shared: the tenant claim %q reached the subject of tenant initech", "tenant:initech")
	}
}

// TestKeySubjects checks that KeySubjects lists exactly the subjects the
// configured keys authenticate as, each once, in both namespaces.
func TestKeySubjects(t *testing.T) {
	for _, share := range []bool{false, true} {
		c := testConfig()
		c.APIKeys = append(c.APIKeys, APIKey{SHA256Hex: HashKey("acme-second-key"), Tenant: "acme", Tier: "free"})
		c.ShareKeyAndJWTTenants = share
		a := mustNew(t, c)
		want := map[string]bool{}
		for _, key := range []string{acmeKey, globexKey, "acme-second-key"} {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Header.Set("X-Api-Key", key)
			caller, err := a.Authenticate(r)
			if err != nil {
				t.Fatal(err)
			}
			want[caller.Subject] = true
		}
		got := a.KeySubjects()
		seen := map[string]bool{}
		for _, s := range got {
			if seen[s] || !want[s] {
				t.Errorf("share=%v: KeySubjects() = %q: %q listed twice or not a key's subject", share, got, s)
			}
			seen[s] = true
		}
		if len(seen) != len(want) {
			t.Errorf("share=%v: KeySubjects() = %q, want the subjects %v", share, got, want)
		}
	}
}
