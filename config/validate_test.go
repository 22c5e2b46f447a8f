package config

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/routes"
)

func TestPathShape(t *testing.T) {
	ok := map[string]string{
		"/":                   "/",
		"/v1/transfers/{id}":  "/v1/transfers/{}",
		"/{rest...}":          "/{...}",
		"/a/{x}/b/{y...}":     "/a/{}/b/{...}",
		"/files/x/~user@host": "/files/x/~user@host",
		"/v1/a:b=d,e+f!$&'()": "/v1/a:b=d,e+f!$&'()",
		"/V1/Transfers/{id}":  "/v1/transfers/{}",
	}
	for path, want := range ok {
		got, err := pathShape(path)
		if err != nil || got != want {
			t.Errorf("pathShape(%q) = %q, %v; want %q", path, got, err, want)
		}
	}
	bad := []string{"", "v1", "/a//b", "/{a}{b}", "/{a", "/a}", "/{a...}/b", "/{a}/{a...}", "/./a",
		"/a/*", "/a?b", "/a#b", "/a;b", "/a./b", "/a/...", "/a%2", "/a%20b", "/a/", "/{a-b}", "/" + strings.Repeat("a", maxPathLen),
		strings.Repeat("/a", maxSegments+1)}
	for _, path := range bad {
		if got, err := pathShape(path); err == nil {
			t.Errorf("pathShape(%q) = %q, want an error", path, got)
		}
	}
}

func TestParseTrusted(t *testing.T) {
	ok := map[string]string{
		"127.0.0.1":           "127.0.0.1/32",
		"10.1.2.3/8":          "10.0.0.0/8",
		"::1":                 "::1/128",
		"2001:db8::/32":       "2001:db8::/32",
		"::ffff:10.0.0.1":     "10.0.0.1/32",
		"::ffff:10.0.0.0/104": "10.0.0.0/8",
	}
	for raw, want := range ok {
		got, err := parseTrusted(raw)
		if err != nil || got != netip.MustParsePrefix(want) {
			t.Errorf("parseTrusted(%q) = %v, %v; want %s", raw, got, err, want)
		}
	}
	for _, raw := range []string{"", "localhost", "10.0.0.0/", "10.0.0.0/33", "fe80::1%eth0", "1.2.3"} {
		if got, err := parseTrusted(raw); err == nil {
			t.Errorf("parseTrusted(%q) = %v, want an error", raw, got)
		}
	}
}

func TestHostPort(t *testing.T) {
	for _, c := range []struct {
		addr     string
		zeroPort bool
		ok       bool
	}{
		{"127.0.0.1:8080", false, true},
		{"[::1]:6379", false, true},
		{"redis-1.internal:6379", false, true},
		{":8080", true, true},
		{"127.0.0.1:0", true, true},
		{"127.0.0.1:0", false, false},
		{":6379", false, false},
		{"localhost", false, false},
		{"localhost:65536", true, false},
		{"localhost:-1", true, false},
		{"bad host:80", true, false},
		{"-bad:80", true, false},
	} {
		if _, err := hostPort(c.addr, c.zeroPort); (err == nil) != c.ok {
			t.Errorf("hostPort(%q, %v) = %v, want ok %v", c.addr, c.zeroPort, err, c.ok)
		}
	}
}

func TestCheckLimitExactRange(t *testing.T) {
	problems := func(l Limit, alg ratelimit.Algorithm) []string {
		var errs Errors
		checkLimit(&errs, "l", l, alg)
		var out []string
		for _, e := range errs {
			out = append(out, e.Path)
		}
		return out
	}
	// 2^53 / 3µs rounds down: the largest rate and burst that stay exact.
	bound := int64((1 << 53) / 3)
	if got := problems(Limit{Rate: bound, Per: 3 * time.Microsecond, Burst: bound}, ratelimit.TokenBucket); got != nil {
		t.Errorf("at the bound: %v, want none", got)
	}
	got := problems(Limit{Rate: bound + 1, Per: 3 * time.Microsecond, Burst: bound + 1}, ratelimit.TokenBucket)
	if !slices.Equal(got, []string{"l.rate", "l.burst"}) {
		t.Errorf("past the bound: %v, want rate and burst", got)
	}
	if got := problems(Limit{Rate: 1, Per: time.Microsecond, Burst: 1}, ratelimit.TokenBucket); got != nil {
		t.Errorf("per 1µs: %v, want none", got)
	}
	if got := problems(Limit{Rate: 1000, Per: time.Hour}, ratelimit.SlidingLog); got != nil {
		t.Errorf("sliding_log at MaxSlidingLogRate: %v, want none", got)
	}
	if got := problems(Limit{Rate: 1001, Per: time.Hour}, ratelimit.SlidingLog); !slices.Equal(got, []string{"l.rate"}) {
		t.Errorf("sliding_log above MaxSlidingLogRate: %v", got)
	}
	if got := problems(Limit{Rate: 5, Per: time.Second}, ratelimit.FixedWindow); got != nil {
		t.Errorf("window without burst: %v, want none", got)
	}
}

func TestNaturalSort(t *testing.T) {
	es := Errors{
		{Path: "routes[10].cost", Problem: "b"},
		{Path: "routes[2].cost", Problem: "a"},
		{Path: "routes", Problem: "x"},
		{Path: "routes[2].cost", Problem: "a"},
		{Path: "identity", Problem: "y"},
		{Path: "routes[02].name", Problem: "c"},
	}
	var got []string
	for _, e := range es.sort() {
		got = append(got, e.Path)
	}
	want := []string{"identity", "routes", "routes[2].cost", "routes[02].name", "routes[10].cost"}
	if !slices.Equal(got, want) {
		t.Errorf("sorted = %v, want %v", got, want)
	}
}

func TestJoin(t *testing.T) {
	for _, c := range [][3]string{
		{"", "server", "server"},
		{"policies", "per-tenant_2", "policies.per-tenant_2"},
		{"policies.a.limits", "*", "policies.a.limits.*"},
		{"upstreams", "api.v2", `upstreams["api.v2"]`},
		{"tiers", "", `tiers[""]`},
	} {
		if got := join(c[0], c[1]); got != c[2] {
			t.Errorf("join(%q, %q) = %q, want %q", c[0], c[1], got, c[2])
		}
	}
}

func TestUnknownKeyHint(t *testing.T) {
	fields := fieldsOf(reflect.TypeFor[Policy]())
	for key, want := range map[string]string{
		"limts":          `unknown key (did you mean "limits"?)`,
		"on_store_erorr": `unknown key (did you mean "on_store_error"?)`,
		"zz":             "unknown key",
		"burst":          "unknown key",
	} {
		if got := unknownKey(key, fields); got != want {
			t.Errorf("unknownKey(%q) = %q, want %q", key, got, want)
		}
	}
}

// builtConfig is a Config built in code, with references in another case.
func builtConfig() *Config {
	c := Default()
	c.Identity.Anonymous = &Anonymous{Tier: "Free"}
	c.Tiers = map[string]Tier{"free": {Local: &Limit{Rate: 1, Per: time.Second, Burst: 3}}}
	c.Policies = map[string]Policy{"p": {Scope: routes.ScopeGlobal, Algorithm: ratelimit.TokenBucket, OnStoreError: ratelimit.OnErrorLocal,
		Limits: map[string]Limit{"*": {Rate: 1, Per: time.Second, Burst: 3}}}}
	c.Upstreams = map[string]Upstream{"up": {URL: "echo:", Timeout: time.Second}}
	c.Routes = []Route{{Name: "r", Method: "GET", Path: "/", Upstream: "UP", Cost: 3, Policies: []PolicyRef{{Name: "P"}}}}
	c.Server.TrustedProxies = []string{"10.0.0.1"}
	return c
}

// A Config built in code is normalized and validated like a loaded one,
// and Normalize can be run again on its result.
func TestValidateBuiltConfig(t *testing.T) {
	c := builtConfig()
	for range 2 {
		c.Normalize()
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	if c.Identity.Anonymous.Tier != "free" || c.Routes[0].Upstream != "up" || c.Routes[0].Policies[0].Name != "p" {
		t.Errorf("references not lowercased: %+v %+v", c.Identity.Anonymous, c.Routes[0])
	}
	if c.Policies["p"].Name != "p" || c.Upstreams["up"].Name != "up" {
		t.Errorf("names not filled: %+v %+v", c.Policies["p"], c.Upstreams["up"])
	}
	if len(c.Server.TrustedPrefixes) != 1 {
		t.Errorf("TrustedPrefixes = %v after two Normalize calls, want one", c.Server.TrustedPrefixes)
	}
	if got := builtConfig(); got.Validate() == nil {
		t.Error("Validate accepted a Config Normalize has not seen: its references are not in their form")
	}

	c.Routes[0].Cost = 4
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), `routes[0].cost: 4 exceeds the capacity 3 of policy "p" for "*"`) ||
		!strings.Contains(err.Error(), `routes[0].cost: 4 exceeds the stage 1 burst 3 of tier "free"`) {
		t.Errorf("Validate = %v, want both cost problems", err)
	}
}

// A tier's own limit replaces "*" for that tier, so "*" is only checked
// against a route's cost when some tier uses it.
func TestCostAgainstEffectiveLimits(t *testing.T) {
	c := Default()
	c.Identity.Anonymous = &Anonymous{Tier: "free"}
	c.Tiers = map[string]Tier{"free": {}}
	c.Policies = map[string]Policy{"p": {Scope: routes.ScopeTenant, Algorithm: ratelimit.TokenBucket, OnStoreError: ratelimit.OnErrorOpen,
		Limits: map[string]Limit{"*": {Rate: 1, Per: time.Second, Burst: 1}, "free": {Rate: 1, Per: time.Second, Burst: 10}}}}
	c.Upstreams = map[string]Upstream{"up": {URL: "echo:", Timeout: time.Second}}
	c.Routes = []Route{{Name: "r", Method: "GET", Path: "/", Upstream: "up", Cost: 10, Policies: []PolicyRef{{Name: "p"}}}}
	c.Normalize()
	if err := c.Validate(); err != nil {
		t.Errorf("Validate = %v, want nil: every tier has its own limit", err)
	}
	c.Tiers["paid"] = Tier{}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `capacity 1 of policy "p" for "*"`) {
		t.Errorf("Validate = %v, want the \"*\" limit checked once a tier uses it", err)
	}
}

func TestRedacted(t *testing.T) {
	c := mustParse(t, `
store:
  redis: {password_env: REDIS_PASSWORD, addrs: ["10.0.0.1:6379"]}
identity:
  api_keys:
    - {key_sha256: 9f8cfdb17116bf0e2a44e071454f25594cb9b8737bf331e6a2f0b30550572f29, tenant: acme, tier: free}
  jwt: {secret_env: JWT_SECRET, issuers: ["https://id.example"], audiences: [quotagate]}
tiers: {free: {local: {rate: 1, per: 250ms, burst: 2}}}
policies:
  w: {algorithm: fixed_window, limits: {"*": {rate: 5, per: 1m}}}
  c: {algorithm: concurrency, limits: {"*": {max: 3}}, queue: {max: 4}}
server: {admin_token_env: QG_ADMIN_TOKEN, pprof: true}
upstreams:
  app: {url: "https://api.example.com/base"}
  keyed: {url: "http://10.0.0.2:8080/v1?api_key=k3y-in-query&x=1"}
routes: [{name: r, method: GET, path: /, upstream: app, policies: [w, c]}]
`, noEnv)
	// Validation refuses credentials in a URL; Redacted hides them anyway.
	for name, raw := range map[string]string{
		"app":   "https://svc:s3cret-pw@api.example.com/base",
		"keyed": "http://svc-user@10.0.0.2:8080/v1?api_key=k3y-in-query&x=1",
	} {
		u := c.Upstreams[name]
		u.URL = raw
		c.Upstreams[name] = u
	}
	out, err := json.Marshal(c.Redacted())
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, secret := range []string{"9f8cfdb1", "s3cret-pw", "key_sha256", "svc", "k3y-in-query", "x=1"} {
		if strings.Contains(s, secret) {
			t.Errorf("Redacted shows %q: %s", secret, s)
		}
	}
	for _, want := range []string{
		`"api_keys":[{"tenant":"acme","tier":"free"}]`,
		`"secret_env":"JWT_SECRET"`,
		`"issuers":["https://id.example"]`,
		`"audiences":["quotagate"]`,
		`"clock_skew":"5s"`,
		`"password_env":"REDIS_PASSWORD"`,
		`"url":"https://redacted@api.example.com/base"`,
		`"url":"http://redacted@10.0.0.2:8080/v1?redacted"`,
		`"admin_token_env":"QG_ADMIN_TOKEN"`,
		`"pprof":true`,
		`"local":{"burst":2,"per":"250ms","rate":1}`,
		`"limits":{"*":{"per":"1m0s","rate":5}}`,
		// A concurrency policy shows what it is made of, not a rate of 0.
		`"limits":{"*":{"max":3}}`,
		`"slot_ttl":"30s"`,
		`"queue":{"max":4,"timeout":"1s"}`,
		`"timeout":"25ms"`,
		`"trusted_proxies":[]`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("Redacted lacks %s:\n%s", want, s)
		}
	}
	// The tree shares no list with the config.
	c.Redacted()["routes"].([]any)[0].(map[string]any)["policies"].([]any)[0] = "changed"
	if c.Routes[0].Policies[0].Name != "w" {
		t.Error("Redacted shares a list with the config")
	}
}

func TestShowURL(t *testing.T) {
	for raw, want := range map[string]string{
		"http://10.0.0.1:9000/base":             "http://10.0.0.1:9000/base",
		"https://u:p@h/x":                       "https://redacted@h/x",
		"https://u@h/x":                         "https://redacted@h/x",
		"https://h/x?token=abc":                 "https://h/x?redacted",
		"https://h/x?":                          "https://h/x?redacted",
		"https://h/x#frag":                      "https://h/x",
		"https://h/%zz":                         "(unparsable URL, not shown)",
		"echo:":                                 "echo:",
		"https://a:b@h:1/p?q=1#f":               "https://redacted@h:1/p?redacted",
		"http://[::1]:8080/?access_token=x&y=z": "http://[::1]:8080/?redacted",
	} {
		if got := showURL(raw); got != want {
			t.Errorf("showURL(%q) = %q, want %q", raw, got, want)
		}
	}
}

// TestAPIKeyTenants: an API key's tenant follows the rule of a JWT's
// (docs/concepts/pipeline.md#store-keys): 1 to 256 bytes without control characters. Keys
// hold only a hash of the subject, so braces, colons and spaces are fine.
func TestAPIKeyTenants(t *testing.T) {
	config := func(tenant string) string {
		return fmt.Sprintf(`
identity:
  api_keys:
    - {key_sha256: 9f8cfdb17116bf0e2a44e071454f25594cb9b8737bf331e6a2f0b30550572f29, tenant: %q, tier: free}
tiers: {free: {}}
upstreams: {app: {url: "echo:"}}
routes: [{name: r, method: GET, path: /, upstream: app}]
`, tenant)
	}
	for _, ok := range []string{"{acme}", "a:b", "Acme Corp", "société", strings.Repeat("a", 256)} {
		if _, err := Parse([]byte(config(ok)), noEnv); err != nil {
			t.Errorf("tenant %q: %v, want it accepted", ok, err)
		}
	}
	const want = "identity.api_keys[0].tenant: must be 1 to 256 bytes without control characters"
	for _, bad := range []string{strings.Repeat("a", 257), "a\tb", "a\x7fb", "a\nb"} {
		if _, err := Parse([]byte(config(bad)), noEnv); err == nil || err.Error() != want {
			t.Errorf("tenant %q: %v, want %q", bad, err, want)
		}
	}
}
