package config

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Validate checks every invariant of c, which Normalize must have put in
// its form, and returns all problems at once, as Errors sorted by path, or
// nil. It changes nothing: a Config it accepts is the one the gateway
// compiles, and the gateway checks nothing again.
func (c *Config) Validate() error {
	var errs Errors
	c.validateServer(&errs)
	c.validateStore(&errs)
	c.validateIdentity(&errs)
	c.validateLog(&errs)
	c.validateTiers(&errs)
	c.validateDimensions(&errs)
	c.validatePrices(&errs)
	c.validatePolicies(&errs)
	c.validateUpstreams(&errs)
	c.validateRoutes(&errs)
	c.validateRLS(&errs)
	c.validateRegions(&errs)
	if len(errs) == 0 {
		return nil
	}
	return errs.sort()
}

// nameRE is the form of every name: tiers, policies, upstreams and routes.
// Names appear in Redis keys, metric labels and headers, so they are short
// and plain.
var nameRE = regexp.MustCompile(`^[a-z0-9_.-]{1,64}$`)

const nameRule = "must be 1 to 64 characters of a-z, 0-9, '_', '.' and '-'"

// envNameRE is the form of an environment variable's name.
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (c *Config) validateServer(errs *Errors) {
	s := &c.Server
	checkListen(errs, "server.listen", s.Listen)
	checkListen(errs, "server.admin_listen", s.AdminListen)
	if s.Listen == s.AdminListen && !strings.HasSuffix(s.Listen, ":0") {
		errs.add("server.admin_listen", "must differ from server.listen")
	}
	if s.AdminTokenEnv != "" && !envNameRE.MatchString(s.AdminTokenEnv) {
		errs.addf("server.admin_token_env", "must name an environment variable, got %q", s.AdminTokenEnv)
	}
	checkAdminHosts(errs, s.AdminHosts)
	positive(errs, "server.read_header_timeout", s.ReadHeaderTimeout)
	positive(errs, "server.idle_timeout", s.IdleTimeout)
	positive(errs, "server.shutdown_timeout", s.ShutdownTimeout)
	positive(errs, "server.max_header_bytes", s.MaxHeaderBytes)
	positive(errs, "server.max_body_bytes", s.MaxBodyBytes)
	if s.BodyReadTimeout <= 0 || s.BodyReadTimeout > MaxBodyReadTimeout {
		errs.addf("server.body_read_timeout", "must be in (0s, %v], got %v", MaxBodyReadTimeout, s.BodyReadTimeout)
	}
	if r := s.BodyMinRate; r != nil && *r < 0 {
		errs.addf("server.body_min_rate", "must be 0 (no minimum) or a rate in bytes per second, got %d", *r)
	}
	if s.BodyBufferBytes < 0 {
		errs.addf("server.body_buffer_bytes", "must be 0 (sized from the memory limit) or a number of bytes, got %d", s.BodyBufferBytes)
	}
	if q := s.QuotaReads; q != nil {
		for key, v := range map[string]int{"rate": q.Rate, "burst": q.Burst, "max_items": q.MaxItems} {
			if b := quotaReadBounds[key]; v < b[0] || v > b[1] {
				errs.addf("server.quota_reads."+key, "must be a whole number from %d to %d, got %d", b[0], b[1], v)
			}
		}
	}
	if !strings.HasPrefix(s.QuotaPath, "/") {
		errs.addf("server.quota_path", "must be a path starting with /, got %q", s.QuotaPath)
	}
	positive(errs, "server.max_local_callers", s.MaxLocalCallers)
	if err := s.ClientSignals.check(); err != nil {
		errs.add("server.client_signals", err.Error())
	}
	if err := s.UpstreamExchanges.check(); err != nil {
		errs.add("server.upstream_exchanges", err.Error())
	}
	if f := s.HeapFloorBytes; f != nil && (*f < 0 || *f > MaxHeapFloorBytes) {
		errs.addf("server.heap_floor_bytes", "must be between 0 (no floor) and %d bytes (64 GiB), got %d", int64(MaxHeapFloorBytes), *f)
	}

	for i, raw := range s.TrustedProxies {
		if _, err := parseTrusted(raw); err != nil {
			errs.add(index("server.trusted_proxies", i), err.Error())
		}
	}
}

// parseTrusted parses a CIDR or a plain IP (a prefix of all its bits). The
// result is masked, and IPv4-mapped IPv6 becomes IPv4.
func parseTrusted(raw string) (netip.Prefix, error) {
	const want = "must be an IP address or a CIDR such as 10.0.0.0/8"
	if strings.Contains(raw, "/") {
		p, err := netip.ParsePrefix(raw)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%s, got %q", want, raw)
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(raw)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%s, got %q", want, raw)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// checkListen checks a listen address: host:port with a numeric port; the
// host may be empty (every interface) and the port 0 (any free port).
func checkListen(errs *Errors, path, addr string) {
	if _, err := hostPort(addr, true); err != nil {
		errs.add(path, err.Error())
	}
}

// hostPort checks that addr is host:port with a port number in range (0
// only when zeroPort) and a host that is empty, an IP or a DNS name.
func hostPort(addr string, zeroPort bool) (string, error) {
	want := "must be host:port, such as 127.0.0.1:6379"
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("%s, got %q", want, addr)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 && !zeroPort {
		return "", fmt.Errorf("%s, got %q (port must be a number from 1 to 65535)", want, addr)
	}
	if host == "" {
		if !zeroPort {
			return "", fmt.Errorf("%s, got %q (missing host)", want, addr)
		}
		return host, nil
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return host, nil
	}
	if !hostnameRE.MatchString(host) {
		return "", fmt.Errorf("%s, got %q (bad host)", want, addr)
	}
	return host, nil
}

var hostnameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,252}[A-Za-z0-9])?$`)

func positive[T int | int64 | time.Duration](errs *Errors, path string, v T) {
	if v <= 0 {
		errs.add(path, "must be > 0")
	}
}

var keyPrefixRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,32}$`)

func (c *Config) validateStore(errs *Errors) {
	s := &c.Store
	if err := s.Kind.check(); err != nil {
		errs.add("store.kind", err.Error())
	}
	if s.FleetSize < 1 {
		errs.add("store.fleet_size", "must be >= 1")
	}
	if s.Fleet.TTL < 300*time.Millisecond {
		errs.addf("store.fleet.ttl", "must be >= 300ms (a heartbeat every ttl/3), got %v", s.Fleet.TTL)
	}
	r := &s.Redis
	if s.Kind == "redis" && len(r.Addrs) == 0 {
		errs.add("store.redis.addrs", `must list at least one host:port when store.kind is "redis"`)
	}
	seen := make(map[string]int, len(r.Addrs))
	for i, a := range r.Addrs {
		p := index("store.redis.addrs", i)
		if _, err := hostPort(a, false); err != nil {
			errs.add(p, err.Error())
		} else if j, dup := seen[a]; dup {
			errs.addf(p, "duplicate of store.redis.addrs[%d]", j)
		}
		seen[a] = i
	}
	if r.PasswordEnv != "" && !envNameRE.MatchString(r.PasswordEnv) {
		errs.addf("store.redis.password_env", "must name an environment variable, got %q", r.PasswordEnv)
	}
	positive(errs, "store.redis.timeout", r.Timeout)
	if r.Timeout > time.Second {
		errs.addf("store.redis.timeout", "must be at most 1s (it is added to a request's latency), got %s", r.Timeout)
	}
	positive(errs, "store.redis.pool_size", r.PoolSize)
	if !keyPrefixRE.MatchString(r.KeyPrefix) {
		errs.addf("store.redis.key_prefix", "must be 1 to 32 characters of A-Z, a-z, 0-9, '_', '.', ':' and '-', got %q", r.KeyPrefix)
	}
	positive(errs, "store.redis.breaker_failures", r.BreakerFailures)
	positive(errs, "store.redis.breaker_cooldown", r.BreakerCooldown)
	validateRedisTLS(errs, "store.redis.tls", r.TLS)
}

// maxTenantBytes is the longest tenant, of an API key here as of a JWT's
// claim (package identity checks the same bounds at start and per token).
// Store keys hold only a hash of it, so any byte is allowed that
// textProblem does not refuse.
const maxTenantBytes = 256

// textProblem returns why s, a non-empty value that is sent upstream in a
// header (a tenant) or compared with a token's claim as written (an issuer,
// an audience), is refused, or "" when it is not:
//
//   - over max bytes, or an ASCII control character (below ' ', or DEL),
//     which a header value must not carry;
//   - white space at either end: any rune unicode.IsSpace reports (tab and
//     no-break space included) or U+FEFF. HTTP parsers trim the spaces and
//     tabs around a header value and frameworks often every Unicode space,
//     so " victim" would keep quotas of its own and reach the upstream as
//     "victim"; YAML and the environment overrides trim them too, so an
//     issuer or audience with them is a typo;
//   - with list, a comma: it splits a header into a list, and "victim,x"
//     would reach many upstreams as "victim". Issuers and audiences are not
//     sent anywhere and may hold one.
//
// Package identity checks tenants by the same rule, at start and per token.
func textProblem(s string, max int, list bool) string {
	if len(s) > max || strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return fmt.Sprintf("must be 1 to %d bytes without control characters", max)
	}
	first, _ := utf8.DecodeRuneInString(s)
	last, _ := utf8.DecodeLastRuneInString(s)
	if edgeSpace(first) || edgeSpace(last) {
		return "must not start or end with white space (a space, a tab or any Unicode space)"
	}
	if list && strings.Contains(s, ",") {
		return "must not contain a comma: it splits the header X-Quotagate-Tenant into a list, and the upstream would read another tenant"
	}
	return ""
}

// edgeSpace reports whether r is white space that a reader may trim from
// the ends of a value.
func edgeSpace(r rune) bool { return unicode.IsSpace(r) || r == '\uFEFF' }

var hexRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

func (c *Config) validateIdentity(errs *Errors) {
	id := &c.Identity
	if len(id.APIKeys) == 0 && id.JWT == nil && id.Anonymous == nil {
		errs.add("identity", "must configure api_keys, jwt or anonymous (without any, every request is answered 401)")
	}
	seen := make(map[string]int, len(id.APIKeys))
	for i := range id.APIKeys {
		k := &id.APIKeys[i]
		p := index("identity.api_keys", i)
		if !hexRE.MatchString(k.KeySHA256) {
			errs.add(p+".key_sha256", "must be the SHA-256 of the key as 64 hex digits (not the key itself)")
		} else if j, dup := seen[k.KeySHA256]; dup {
			errs.addf(p+".key_sha256", "duplicate of identity.api_keys[%d]", j)
		} else {
			seen[k.KeySHA256] = i
		}
		if k.Tenant == "" {
			errs.add(p+".tenant", "is required")
		} else if problem := textProblem(k.Tenant, maxTenantBytes, true); problem != "" {
			errs.add(p+".tenant", problem)
		}
		c.checkTierRef(errs, p+".tier", k.Tier)
	}
	if j := id.JWT; j != nil {
		switch {
		case j.SecretEnv == "":
			errs.add("identity.jwt.secret_env", "is required: the name of the environment variable holding the HS256 secret")
		case !envNameRE.MatchString(j.SecretEnv):
			errs.addf("identity.jwt.secret_env", "must name an environment variable, got %q", j.SecretEnv)
		}
		if j.TenantClaim == "" {
			errs.add("identity.jwt.tenant_claim", "must not be empty")
		}
		if j.TierClaim == "" {
			errs.add("identity.jwt.tier_claim", "must not be empty")
		}
		checkJWTValues(errs, "identity.jwt.issuers", j.Issuers)
		checkJWTValues(errs, "identity.jwt.audiences", j.Audiences)
		if j.ClockSkew < 0 || j.ClockSkew > MaxJWTClockSkew {
			errs.addf("identity.jwt.clock_skew", "must be 0s (no leeway) to %v (the leeway on exp, nbf and iat; left out means %v), got %v", MaxJWTClockSkew, DefaultJWTClockSkew, j.ClockSkew)
		}
	}
	if a := id.Anonymous; a != nil {
		c.checkTierRef(errs, "identity.anonymous.tier", a.Tier)
		switch {
		case a.IPv6Prefix < 32 || a.IPv6Prefix > 128:
			errs.addf("identity.anonymous.ipv6_prefix", "must be 32 to 128 (the bits of the IPv6 prefix that is one caller; 0 or left out means 64), got %d", a.IPv6Prefix)
		}
	}
}

// maxJWTValueBytes is the longest accepted issuer or audience.
const maxJWTValueBytes = 1024

// checkJWTValues checks a list of accepted issuers or audiences: each 1 to
// maxJWTValueBytes bytes without control characters or white space at
// either end (see textProblem), none twice. They are compared with the
// token's claims byte for byte, so they are not lowercased or trimmed.
func checkJWTValues(errs *Errors, path string, list []string) {
	seen := make(map[string]int, len(list))
	for i, v := range list {
		p := index(path, i)
		switch {
		case v == "":
			errs.add(p, "must not be empty")
		case textProblem(v, maxJWTValueBytes, false) != "":
			errs.add(p, textProblem(v, maxJWTValueBytes, false))
		default:
			if j, dup := seen[v]; dup {
				errs.addf(p, "duplicate of %s", index(path, j))
			}
			seen[v] = i
		}
	}
}

// checkTierRef checks that the tier a reference names exists.
func (c *Config) checkTierRef(errs *Errors, path, tier string) {
	switch _, ok := c.Tiers[tier]; {
	case tier == "":
		errs.add(path, "is required")
	case !ok:
		errs.addf(path, "unknown tier %q%s", tier, known(c.Tiers))
	}
}

func (c *Config) validateLog(errs *Errors) {
	if err := c.Log.Level.check(); err != nil {
		errs.add("log.level", err.Error())
	}
}

// known lists the keys of m for a problem message: " (known: a, b)".
func known[V any](m map[string]V) string {
	if len(m) == 0 {
		return " (none are defined)"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if len(keys) > 10 {
		keys = append(keys[:10], "...")
	}
	return " (known: " + strings.Join(keys, ", ") + ")"
}
