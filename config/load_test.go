package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/routes"
)

// env returns a getenv that finds only the variables of m.
func env(m map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

func mustParse(t *testing.T, yaml string, getenv func(string) (string, bool)) *Config {
	t.Helper()
	c, err := Parse([]byte(yaml), getenv)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return c
}

func TestShippedConfig(t *testing.T) {
	c, err := Load("../config.yaml", noEnv)
	if err != nil {
		t.Fatalf("the shipped config.yaml does not load:\n%v", err)
	}
	if c.Store.Kind != "memory" || c.Identity.Anonymous == nil || c.Identity.JWT != nil {
		t.Errorf("store %q, anonymous %v, jwt %v: want memory, anonymous on, jwt off", c.Store.Kind, c.Identity.Anonymous, c.Identity.JWT)
	}
	if u := c.Upstreams["demo"]; u.URL != EchoURL || u.Name != "demo" {
		t.Errorf("upstream demo = %+v, want the echo responder", u)
	}
	// The demo keys named in the file's comments hash to the listed keys.
	for plain, tier := range map[string]string{"demo-free-key": "free", "demo-enterprise-key": "enterprise"} {
		sum := sha256.Sum256([]byte(plain))
		i := slices.IndexFunc(c.Identity.APIKeys, func(k APIKey) bool { return k.KeySHA256 == hex.EncodeToString(sum[:]) })
		if i < 0 || c.Identity.APIKeys[i].Tier != tier {
			t.Errorf("key %q: not listed with tier %q", plain, tier)
		}
	}
	// A caller with curl sees a 429 after a handful of requests.
	anon := c.Policies["tenant"].Limits[c.Identity.Anonymous.Tier]
	if anon.Burst == 0 || anon.Burst > 10 {
		t.Errorf("anonymous tenant burst = %d, want a handful", anon.Burst)
	}
	var names []string
	for _, r := range c.Routes {
		names = append(names, r.Name)
	}
	if want := []string{"transfers.create", "transfers.get", "other.get"}; !slices.Equal(names, want) {
		t.Errorf("routes = %v, want %v", names, want)
	}
	if r := c.Routes[0]; r.Cost != 5 || !slices.Equal(r.PolicyNames(), []string{"tenant", "transfers", "inflight"}) || r.Path != "/v1/transfers/{id}" {
		t.Errorf("transfers.create = %+v", r)
	}
	want := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	if !slices.Equal(c.Server.TrustedPrefixes, want) {
		t.Errorf("TrustedPrefixes = %v, want %v", c.Server.TrustedPrefixes, want)
	}
}

func TestDefaults(t *testing.T) {
	c, err := Load("testdata/minimal.yaml", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := Server{
		Listen:            "127.0.0.1:8080",
		AdminListen:       "127.0.0.1:9090",
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    65536,
		MaxBodyBytes:      10 << 20,
		BodyReadTimeout:   DefaultBodyReadTimeout,
		BodyMinRate:       new(int64(DefaultBodyMinRate)),
		QuotaPath:         "/_quota",
		ShutdownTimeout:   10 * time.Second,
		MaxLocalCallers:   1_000_000,
		UpstreamExchanges: "direct",
		ClientSignals:     "none",
		HeapFloorBytes:    new(int64(DefaultHeapFloorBytes)),
	}
	if !reflect.DeepEqual(c.Server, want) {
		t.Errorf("Server = %+v\nwant %+v", c.Server, want)
	}
	wantStore := Store{Kind: "memory", FleetSize: 1, Fleet: Fleet{TTL: 15 * time.Second}, Redis: Redis{
		Timeout: 25 * time.Millisecond, PoolSize: 64, KeyPrefix: "qg",
		BreakerFailures: 5, BreakerCooldown: time.Second,
	}}
	if !reflect.DeepEqual(c.Store, wantStore) {
		t.Errorf("Store = %+v\nwant %+v", c.Store, wantStore)
	}
	if c.Log.Level != "info" {
		t.Errorf("log.level = %q, want info", c.Log.Level)
	}
	if c.Tiers["basic"].Local != nil {
		t.Errorf("tier basic: {} has stage 1 %+v, want none", c.Tiers["basic"].Local)
	}
	wantPolicy := Policy{Name: "tenant", Scope: routes.ScopeTenant, Algorithm: ratelimit.TokenBucket, OnStoreError: ratelimit.OnErrorOpen,
		Limits: map[string]Limit{"basic": {Rate: 1, Per: time.Second, Burst: 2}}}
	if !reflect.DeepEqual(c.Policies["tenant"], wantPolicy) {
		t.Errorf("policy = %+v\nwant %+v", c.Policies["tenant"], wantPolicy)
	}
	if u := c.Upstreams["app"]; u.Timeout != 30*time.Second || u.Name != "app" {
		t.Errorf("upstream = %+v, want timeout 30s", u)
	}
	if r := c.Routes[0]; r.Cost != 1 || len(r.Policies) != 0 {
		t.Errorf("route = %+v, want cost 1 and no policies", r)
	}
	if c.Identity.JWT != nil || len(c.Identity.APIKeys) != 0 {
		t.Errorf("identity = %+v, want anonymous only", c.Identity)
	}
}

const withJWT = `
identity:
  jwt: {secret_env: JWT_SECRET}
tiers: {free: {}}
upstreams: {app: {url: "http://127.0.0.1:9001"}}
routes: [{name: r, method: GET, path: /, upstream: app}]
`

func TestJWTDefaults(t *testing.T) {
	c := mustParse(t, withJWT, noEnv)
	want := &JWT{SecretEnv: "JWT_SECRET", TenantClaim: "sub", TierClaim: "tier", ClockSkew: 5 * time.Second}
	if !reflect.DeepEqual(c.Identity.JWT, want) {
		t.Errorf("JWT = %+v, want %+v", c.Identity.JWT, want)
	}
}

func TestEnvOverrides(t *testing.T) {
	c, err := Load("testdata/minimal.yaml", env(map[string]string{
		"QUOTAGATE_STORE_KIND":                "redis",
		"QUOTAGATE_STORE_REDIS_ADDRS":         "10.0.0.1:6379, 10.0.0.2:6379,",
		"QUOTAGATE_STORE_REDIS_TIMEOUT":       "50ms",
		"QUOTAGATE_STORE_FLEET_SIZE":          "3",
		"QUOTAGATE_SERVER_LISTEN":             ":8443",
		"QUOTAGATE_SERVER_TRUSTED_PROXIES":    "10.0.0.0/8,::1",
		"QUOTAGATE_SERVER_MAX_HEADER_BYTES":   "8192",
		"QUOTAGATE_LOG_LEVEL":                 "debug",
		"QUOTAGATE_IDENTITY_JWT_SECRET_ENV":   "MY_SECRET",
		"QUOTAGATE_IDENTITY_ANONYMOUS_TIER":   "Basic",
		"QUOTAGATE_SERVER_SHUTDOWN_TIMEOUT":   "", // empty: ignored
		"QUOTAGATE_POLICIES_TENANT_SCOPE":     "global",
		"QUOTAGATE_STORE_REDIS_PASSWORD":      "hunter2",
		"quotagate_store_redis_key_prefix":    "lowercase",
		"QUOTAGATE_STORE_REDIS_BREAKER_COUNT": "9",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Store.Kind != "redis" || c.Store.FleetSize != 3 || c.Store.Redis.Timeout != 50*time.Millisecond {
		t.Errorf("store = %+v", c.Store)
	}
	if want := []string{"10.0.0.1:6379", "10.0.0.2:6379"}; !slices.Equal(c.Store.Redis.Addrs, want) {
		t.Errorf("addrs = %q, want %q", c.Store.Redis.Addrs, want)
	}
	if c.Server.Listen != ":8443" || c.Server.MaxHeaderBytes != 8192 || c.Server.ShutdownTimeout != 10*time.Second {
		t.Errorf("server = %+v", c.Server)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	if !slices.Equal(c.Server.TrustedPrefixes, want) {
		t.Errorf("trusted = %v, want %v", c.Server.TrustedPrefixes, want)
	}
	if c.Log.Level != "debug" {
		t.Errorf("log.level = %q", c.Log.Level)
	}
	// A variable can enable a block the file leaves out; defaults fill the rest.
	if j := c.Identity.JWT; j == nil || j.SecretEnv != "MY_SECRET" || j.TenantClaim != "sub" {
		t.Errorf("jwt = %+v", j)
	}
	if c.Identity.Anonymous.Tier != "basic" {
		t.Errorf("anonymous tier = %q, want basic (lowercased)", c.Identity.Anonymous.Tier)
	}
	// Named sections have no variables; unknown variables are ignored.
	if c.Policies["tenant"].Scope != routes.ScopeTenant || c.Store.Redis.KeyPrefix != "qg" {
		t.Errorf("scope %v, key prefix %q: want the file's values", c.Policies["tenant"].Scope, c.Store.Redis.KeyPrefix)
	}
}

func TestEnvOverrideInvalid(t *testing.T) {
	_, err := Load("testdata/minimal.yaml", env(map[string]string{
		"QUOTAGATE_STORE_REDIS_TIMEOUT": "fast",
		"QUOTAGATE_STORE_KIND":          "redis",
		"QUOTAGATE_STORE_REDIS_ADDRS":   " , ",
	}))
	want := `store.redis.addrs: must list at least one host:port when store.kind is "redis" (from QUOTAGATE_STORE_REDIS_ADDRS)` + "\n" +
		`store.redis.timeout: must be a duration such as 250ms, 1s or 1m, got "fast" (from QUOTAGATE_STORE_REDIS_TIMEOUT)`
	if err == nil || err.Error() != want {
		t.Errorf("err = %v\nwant %s", err, want)
	}
}

// TestEnvOverrideRefusedByValidation: a value from a variable that decodes
// but that validation refuses (out of range, or an item of a list) names
// the variable, as one that does not decode does; a value refused in the
// file names none.
func TestEnvOverrideRefusedByValidation(t *testing.T) {
	minimal, err := os.ReadFile("testdata/minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	yaml := strings.Replace(string(minimal), "identity:",
		"store: {fleet: {ttl: 100ms}}\nidentity:", 1)
	vars := map[string]string{
		"QUOTAGATE_STORE_KIND":                  "redis",
		"QUOTAGATE_STORE_REDIS_TIMEOUT":         "5s",
		"QUOTAGATE_STORE_REDIS_ADDRS":           "10.0.0.1:6379,10.0.0.1:6379",
		"QUOTAGATE_STORE_FLEET_SIZE":            "0",
		"QUOTAGATE_LOG_LEVEL":                   "loud",
		"QUOTAGATE_IDENTITY_ANONYMOUS_TIER":     "nobody",
		"QUOTAGATE_IDENTITY_JWT_SECRET_ENV":     "JWT_SECRET",
		"QUOTAGATE_IDENTITY_JWT_CLOCK_SKEW":     "1h",
		"QUOTAGATE_SERVER_HEAP_FLOOR_BYTES":     "-1",
		"QUOTAGATE_STORE_REDIS_PASSWORD_ENV":    "1BAD",
		"QUOTAGATE_SERVER_TRUSTED_PROXIES":      "10.0.0.0/8,not-a-prefix",
		"QUOTAGATE_STORE_REDIS_TLS_SERVER_NAME": "redis.internal",
	}
	_, err = Parse([]byte(yaml), env(vars))
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("err = %v, want config Errors", err)
	}
	byPath := map[string]string{}
	for _, e := range errs {
		byPath[e.Path] = e.Problem
	}
	for path, name := range map[string]string{
		"store.redis.timeout":         "QUOTAGATE_STORE_REDIS_TIMEOUT",
		"store.redis.addrs[1]":        "QUOTAGATE_STORE_REDIS_ADDRS",
		"store.fleet_size":            "QUOTAGATE_STORE_FLEET_SIZE",
		"log.level":                   "QUOTAGATE_LOG_LEVEL",
		"identity.anonymous.tier":     "QUOTAGATE_IDENTITY_ANONYMOUS_TIER",
		"identity.jwt.clock_skew":     "QUOTAGATE_IDENTITY_JWT_CLOCK_SKEW",
		"server.heap_floor_bytes":     "QUOTAGATE_SERVER_HEAP_FLOOR_BYTES",
		"store.redis.password_env":    "QUOTAGATE_STORE_REDIS_PASSWORD_ENV",
		"server.trusted_proxies[1]":   "QUOTAGATE_SERVER_TRUSTED_PROXIES",
		"store.redis.tls.server_name": "QUOTAGATE_STORE_REDIS_TLS_SERVER_NAME",
	} {
		problem, ok := byPath[path]
		if !ok {
			t.Errorf("no problem at %s; got:\n%v", path, err)
			continue
		}
		if want := " (from " + name + ")"; !strings.HasSuffix(problem, want) || strings.Count(problem, "(from ") != 1 {
			t.Errorf("%s: %s\nwant it to end with%s", path, problem, want)
		}
	}
	if problem, ok := byPath["store.fleet.ttl"]; !ok || strings.Contains(problem, "(from ") {
		t.Errorf("store.fleet.ttl, set in the file: %q, want a problem naming no variable", problem)
	}

	// A TLS file that can be read but holds no certificate.
	_, err = Parse(minimal, env(map[string]string{
		"QUOTAGATE_STORE_REDIS_TLS_ENABLED": "true",
		"QUOTAGATE_STORE_REDIS_TLS_CA_FILE": "testdata/minimal.yaml",
	}))
	want := "store.redis.tls.ca_file: testdata/minimal.yaml holds no PEM certificate (from QUOTAGATE_STORE_REDIS_TLS_CA_FILE)"
	if err == nil || err.Error() != want {
		t.Errorf("a CA file without a certificate, from a variable: %v\nwant %s", err, want)
	}
}

func TestEnvLeaves(t *testing.T) {
	var names []string
	for _, l := range envLeaves("", reflect.TypeFor[Config]()) {
		names = append(names, l.path)
	}
	for _, want := range []string{"server.listen", "server.trusted_proxies", "server.max_local_callers",
		"store.kind", "store.fleet_size", "store.redis.addrs", "store.redis.breaker_cooldown",
		"identity.jwt.secret_env", "identity.jwt.share_tenants_with_api_keys", "identity.jwt.audiences", "identity.jwt.clock_skew", "identity.anonymous.tier", "log.level"} {
		if !slices.Contains(names, want) {
			t.Errorf("no variable for %s", want)
		}
	}
	for _, n := range names {
		if strings.HasPrefix(n, "tiers") || strings.HasPrefix(n, "policies") || strings.HasPrefix(n, "routes") ||
			strings.HasPrefix(n, "upstreams") || strings.HasPrefix(n, "identity.api_keys") || strings.Contains(n, "trusted_prefixes") {
			t.Errorf("unexpected variable for %s", n)
		}
	}
}

// Names may contain dots and dashes and are case-insensitive, references
// included.
func TestNames(t *testing.T) {
	c := mustParse(t, `
identity:
  api_keys:
    - {key_sha256: 9F8CFDB17116BF0E2A44E071454F25594CB9B8737BF331E6A2F0B30550572F29, tenant: Acme, tier: Gold.V2}
tiers:
  gold.v2: {local: {rate: 5, per: 1s, burst: 5}}
  bronze-1:
policies:
  Per.Tenant:
    limits:
      GOLD.V2: {rate: 1, per: 1s, burst: 5}
upstreams:
  Api.Internal-1: {url: "https://api.internal:8443/base"}
routes:
  - {name: a.b-c_d, method: PATCH, path: "/v1/{id}", upstream: API.internal-1, policies: [per.TENANT]}
`, noEnv)
	if _, ok := c.Tiers["bronze-1"]; !ok {
		t.Errorf("tier bronze-1 written without a value is missing: %v", c.Tiers)
	}
	if k := c.Identity.APIKeys[0]; k.Tier != "gold.v2" || k.Tenant != "Acme" || k.KeySHA256 != "9f8cfdb17116bf0e2a44e071454f25594cb9b8737bf331e6a2f0b30550572f29" {
		t.Errorf("api key = %+v: want tier and hash lowercased, tenant as written", k)
	}
	p, ok := c.Policies["per.tenant"]
	if !ok || p.Name != "per.tenant" || p.Limits["gold.v2"].Burst != 5 {
		t.Errorf("policies = %+v", c.Policies)
	}
	if r := c.Routes[0]; r.Upstream != "api.internal-1" || !slices.Equal(r.PolicyNames(), []string{"per.tenant"}) {
		t.Errorf("route = %+v", r)
	}
}

// An explicit value overrides its default, even a zero one, and a key
// without a value leaves the default.
func TestExplicitZero(t *testing.T) {
	_, err := Parse([]byte(withJWT+"server: {idle_timeout: 0, max_header_bytes: 0, listen: }\n"), noEnv)
	want := "server.idle_timeout: must be > 0\nserver.max_header_bytes: must be > 0"
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %s", err, want)
	}
}

func TestYAMLFeatures(t *testing.T) {
	// Anchors and merge keys work; numbers with underscores too.
	c := mustParse(t, withJWT+`
policies:
  a: &base
    algorithm: fixed_window
    limits: {"*": {rate: 1_000, per: 1m}}
  b:
    <<: *base
    shadow: true
`, noEnv)
	a, b := c.Policies["a"], c.Policies["b"]
	if b.Algorithm != ratelimit.FixedWindow || !b.Shadow || b.Limits["*"].Rate != 1000 || a.Shadow {
		t.Errorf("a = %+v, b = %+v", a, b)
	}
}

func TestEmptyDocument(t *testing.T) {
	_, err := Parse(nil, noEnv)
	var es Errors
	if !errors.As(err, &es) || len(es) != 2 || es[0].Path != "identity" || es[1].Path != "routes" {
		t.Errorf("Parse(empty) = %v, want identity and routes required", err)
	}
}

// TestHeapFloorZeroKept: server.heap_floor_bytes: 0 turns the floor off,
// so it is kept as 0, not replaced by the default.
func TestHeapFloorZeroKept(t *testing.T) {
	b, err := os.ReadFile("testdata/minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, append(b, "server: {heap_floor_bytes: 0}\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if f := c.Server.HeapFloorBytes; f == nil || *f != 0 {
		t.Errorf("heap_floor_bytes: 0 loaded as %v, want 0", f)
	}
}

// TestJWTClockSkewZeroKept: identity.jwt.clock_skew left out (or written
// empty) is the default 5s, and a written 0s, from the file or the
// environment, is kept: no leeway. Before, 0 was taken for "left out" and
// replaced by 5s, so no exact expiry could be configured.
func TestJWTClockSkewZeroKept(t *testing.T) {
	with := func(skew string) string {
		return strings.Replace(withJWT, "jwt: {secret_env: JWT_SECRET}", "jwt: {secret_env: JWT_SECRET"+skew+"}", 1)
	}
	for _, tc := range []struct {
		name, yaml string
		env        map[string]string
		want       time.Duration
	}{
		{"left out", withJWT, nil, DefaultJWTClockSkew},
		{"written empty", with(", clock_skew: "), nil, DefaultJWTClockSkew},
		{"0s", with(", clock_skew: 0s"), nil, 0},
		{"0", with(", clock_skew: 0"), nil, 0},
		{"2s", with(", clock_skew: 2s"), nil, 2 * time.Second},
		{"0s from the environment", withJWT, map[string]string{"QUOTAGATE_IDENTITY_JWT_CLOCK_SKEW": "0s"}, 0},
	} {
		getenv := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
		c := mustParse(t, tc.yaml, getenv)
		if got := c.Identity.JWT.ClockSkew; got != tc.want {
			t.Errorf("%s: clock_skew %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRLSShutdownDelay: rls.shutdown_delay left out is the default; a
// written 0s is kept (no delay), not replaced by it.
func TestRLSShutdownDelay(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want time.Duration
	}{
		{"", DefaultRLSShutdownDelay},
		{"rls: {shutdown_delay: }\n", DefaultRLSShutdownDelay},
		{"rls: {shutdown_delay: 0s}\n", 0},
		{"rls: {shutdown_delay: 1m}\n", time.Minute},
	} {
		c := mustParse(t, withJWT+tc.yaml, noEnv)
		if c.RLS.ShutdownDelay != tc.want {
			t.Errorf("%q: shutdown_delay %v, want %v", tc.yaml, c.RLS.ShutdownDelay, tc.want)
		}
	}
}

// TestLoadDigestIsTheLoadedContent: LoadDigest's Digest is that of the
// bytes it parsed, the one FileDigest gives for the same content, so a
// watcher comparing with it sees any later change; an unreadable file is
// an error naming it, as with Load.
func TestLoadDigestIsTheLoadedContent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(minimalDigestConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	_, loaded, err := LoadDigest(path, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if now, ok := FileDigest(path); !ok || now != loaded {
		t.Fatalf("FileDigest of the unchanged file = %x, %v; LoadDigest gave %x", now, ok, loaded)
	}
	if err := os.WriteFile(path, []byte(minimalDigestConfig+"# changed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if now, _ := FileDigest(path); now == loaded {
		t.Fatal("a changed file has the digest of what was loaded")
	}
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	if _, _, err := LoadDigest(missing, nil); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("LoadDigest of a missing file: %v, want an error naming it", err)
	}
}

const minimalDigestConfig = `store: {kind: memory}
identity: {anonymous: {tier: anonymous}}
tiers: {anonymous: {}}
upstreams: {app: {url: "echo:"}}
routes: [{name: app, method: GET, path: /, upstream: app}]
`
