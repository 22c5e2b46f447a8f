// Package config loads and validates quotagate's configuration file.
//
// A configuration is read with Load (or Parse), which decodes the YAML
// strictly (an unknown key is an error naming its full path), applies
// QUOTAGATE_* environment overrides, fills defaults, then calls Normalize and
// Validate. After
// that a *Config is plain data: nothing in it changes, and the packages that
// use it never re-check it.
//
// Names (of tiers, policies and upstreams, and the tier keys of a policy's
// limits) are case-insensitive: keys are lowercased when read, references to
// them (route.upstream, route.policies, api_keys[].tier, anonymous.tier) are
// lowercased as the file is read, and two keys of one mapping that differ only in case
// are an error. Route names, methods and paths are values and keep their case.
//
// A key written with an empty value (`listen:`) counts as not written: the
// default applies. A name written with an empty value (`free:` under tiers)
// or an empty mapping (`free: {}`) still defines it: here, a tier without
// stage 1.
package config

import (
	"net/netip"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/routes"
	"github.com/quotagate/quotagate/usage"
)

// Config is a whole, validated configuration.
type Config struct {
	Server   Server   `mapstructure:"server"`
	Store    Store    `mapstructure:"store"`
	Identity Identity `mapstructure:"identity"`
	Log      Log      `mapstructure:"log"`
	// Tiers holds stage 1 (per instance, per caller) by tier name.
	Tiers map[string]Tier `mapstructure:"tiers"`
	// Policies holds the stage 2 (fleet-wide) policies by name.
	Policies map[string]Policy `mapstructure:"policies"`
	// Upstreams holds the services requests are forwarded to, by name.
	Upstreams map[string]Upstream `mapstructure:"upstreams"`
	// Routes are matched in order; the first match wins.
	Routes []Route `mapstructure:"routes"`
	// Prices holds the price of each model (a value of a dimension, or
	// "*" for every value without its own entry and the shared bucket)
	// that measures read with price(<dimension>).<field>.
	Prices map[string]Price `mapstructure:"prices"`
	// Dimensions are values read from each request (a JSON body field
	// such as model, or a header) that policies may be keyed by
	// (policies.<name>.by), by name: 1 to 32 of [a-z0-9_].
	Dimensions map[string]Dimension `mapstructure:"dimensions"`
	// RLS is the decision service (Envoy RLS v3 and the HTTP check API);
	// off by default.
	RLS RLS `mapstructure:"rls"`

	// env maps the paths Load set from environment variables to the
	// variables' names (see Sourced).
	env map[string]string
}

// Server configures the two listeners and their HTTP limits.
type Server struct {
	// Listen is the gateway's host:port (default 127.0.0.1:8080). Port 0
	// picks a free port. Read at start only.
	Listen string `mapstructure:"listen"`
	// AdminListen serves /metrics, /healthz, /readyz and /config (default
	// 127.0.0.1:9090). Read at start only.
	AdminListen string `mapstructure:"admin_listen"`
	// AdminTokenEnv names the environment variable holding the bearer
	// token that the admin listener's protected endpoints (/config,
	// /hotkeys, /debug/pprof/) require. The variable must be set and
	// non-empty at start. Empty: no token, and the protected endpoints are
	// served only while the admin listener is bound to a loopback address.
	AdminTokenEnv string `mapstructure:"admin_token_env"`
	// AdminHosts are the further names the admin listener answers for,
	// such as quotagate-admin.internal: host names without port or
	// wildcard, compared with the request's Host case-insensitively and
	// whatever its port. Without them it answers a Host that is an IP
	// address (kubelet probes send the pod's IP, Prometheus its target
	// address, and no IP can be re-bound by DNS), "localhost", the host of
	// AdminListen when that is a name, or no Host (HTTP/1.0); any other
	// Host, the machine's hostname included, is answered 421 Misdirected
	// Request on every admin endpoint, so that a page in a browser on
	// this host cannot read /config through a name re-bound to 127.0.0.1
	// (DNS rebinding). They are lowercased as the file is read.
	AdminHosts []string `mapstructure:"admin_hosts"`
	// Pprof serves Go's profiles under /debug/pprof/ on the admin listener,
	// behind the same protection (default false: 404).
	Pprof bool `mapstructure:"pprof"`
	// ReadHeaderTimeout bounds reading a request's headers (default 5s).
	// Read at start only.
	ReadHeaderTimeout time.Duration `mapstructure:"read_header_timeout"`
	// IdleTimeout closes keep-alive connections idle this long (default 90s).
	// Read at start only.
	IdleTimeout time.Duration `mapstructure:"idle_timeout"`
	// MaxHeaderBytes bounds a request's header size, in bytes (default
	// 65536). Read at start only.
	MaxHeaderBytes int `mapstructure:"max_header_bytes"`
	// MaxBodyBytes bounds a request body; larger bodies are answered 413
	// (default 10 MiB). It is always > 0: there is no "unlimited".
	MaxBodyBytes int64 `mapstructure:"max_body_bytes"`
	// BodyReadTimeout bounds the wait for the next bytes of a request
	// body: when a read of the caller's body brings nothing for this
	// long, the request ends with 408 (default 10s, at most 10m). Like
	// nginx's client_body_timeout it is the time between two reads, not
	// the whole upload; BodyMinRate bounds that.
	BodyReadTimeout time.Duration `mapstructure:"body_read_timeout"`
	// BodyMinRate is the least average rate, in bytes per second, at
	// which a request body must arrive once its first BodyReadTimeout has
	// passed: a body whose bytes read so far fall below
	// BodyMinRate × (elapsed − BodyReadTimeout) ends with 408. So an
	// upload of n bytes may take at most BodyReadTimeout + n/BodyMinRate.
	// Default 1024; a written 0 turns the rate check off (the read
	// timeout still applies).
	BodyMinRate *int64 `mapstructure:"body_min_rate"`
	// BodyBufferBytes is the gateway-wide budget, in bytes, of request
	// body bytes held in memory at once to find a reservation
	// (routes[].cost.reserve_from.json). A request whose body would go
	// past it is not buffered further: it reserves its route's max and is
	// forwarded as it streams. 0 (the default) sizes it at an eighth of
	// the memory limit in force (GOMEMLIMIT, or the cgroup's memory.max)
	// and at 64 MiB without one. Read at start only.
	BodyBufferBytes int64 `mapstructure:"body_buffer_bytes"`
	// QuotaPath is where a caller reads its own quotas with GET on the
	// public listener, before routing (default "/_quota"; see
	// docs/reference/http-api.md#the-quota-endpoint). It must start with "/".
	QuotaPath string `mapstructure:"quota_path"`
	// QuotaReads bounds the quota endpoint's store reads (see QuotaReads;
	// nil means every default: read it with Reads).
	QuotaReads *QuotaReads `mapstructure:"quota_reads"`
	// ShutdownTimeout bounds draining in-flight requests on SIGINT/SIGTERM
	// (default 10s).
	ShutdownTimeout time.Duration `mapstructure:"shutdown_timeout"`
	// TrustedProxies are the peers allowed to set X-Forwarded-For, as
	// written: CIDRs or plain IPs.
	TrustedProxies []string `mapstructure:"trusted_proxies"`
	// TrustedPrefixes is TrustedProxies parsed by Normalize: masked
	// prefixes, a plain IP as a /32 or /128, IPv4-mapped IPv6 unmapped.
	TrustedPrefixes []netip.Prefix `mapstructure:"-"`
	// MaxLocalCallers bounds the stage 1 limiters kept per tier (default
	// 1,000,000).
	MaxLocalCallers int `mapstructure:"max_local_callers"`
	// UpstreamExchanges is how requests without a body reach http
	// upstreams: "direct" (default) writes each one and reads its
	// response on the request's own goroutine; "standard" sends every
	// request through net/http's Transport. Read at start only.
	UpstreamExchanges Exchanges `mapstructure:"upstream_exchanges"`
	// ClientSignals is the client_signals of every route that does not
	// set its own: "none" (default) or "openai" (see
	// routes[].client_signals).
	ClientSignals ClientSignals `mapstructure:"client_signals"`
	// HeapFloorBytes is the heap size, in bytes, below which the garbage
	// collector does not start a cycle (default 64 MiB; 0 turns the floor
	// off; at most MaxHeapFloorBytes). It applies only when GOGC is not
	// set in the environment, and is capped at a quarter of the runtime's
	// memory limit when one is in force. Never nil after defaults. Read at
	// start only.
	HeapFloorBytes *int64 `mapstructure:"heap_floor_bytes"`
}

// Defaults and bounds of the request body's deadlines (see
// Server.BodyReadTimeout and Server.BodyMinRate).
const (
	DefaultBodyReadTimeout = 10 * time.Second
	MaxBodyReadTimeout     = 10 * time.Minute
	DefaultBodyMinRate     = 1024
)

// DefaultHeapFloorBytes is server.heap_floor_bytes when it is not set.
const DefaultHeapFloorBytes = 64 << 20

// MaxHeapFloorBytes bounds server.heap_floor_bytes (64 GiB): a floor is
// memory the gateway may hold as garbage, and a larger one is a typo.
const MaxHeapFloorBytes = 64 << 30

// Store selects and configures stage 2, the global decision.
type Store struct {
	// Kind is "memory" (embedded, this instance only; the default) or
	// "redis" (shared by the fleet).
	Kind  StoreKind `mapstructure:"kind"`
	Redis Redis     `mapstructure:"redis"`
	// FleetSize is the least number of instances assumed to share the
	// store (default 1). The fleet's size is the larger of it and the
	// number of instances registered live in Redis (see Fleet); with
	// Fleet.Static, or the memory store, it is FleetSize exactly. A policy
	// with on_store_error: local falls back to this instance's share of
	// each limit, rate / fleet size; lease blocks are sized by it too.
	FleetSize int `mapstructure:"fleet_size"`
	// Fleet configures how the instances of a Redis fleet count each
	// other.
	Fleet Fleet `mapstructure:"fleet"`
	// Region names this instance's region (a-z, 0-9, '_', '.', '-'; at
	// most 64): the instances of one region share store.redis and decide
	// there. Empty (the default) is a single-region fleet. Required with
	// Global. Read at start and on reload.
	Region string `mapstructure:"region"`
	// Global, when set, is the global owner of the policies marked
	// regions (see docs/concepts/regions.md); nil means none, and no
	// policy may be marked. Requires kind redis and Region.
	Global *Global `mapstructure:"global"`
}

// Fleet configures fleet membership: each instance of a Redis store
// registers in Redis with a heartbeat, and the live registrations are the
// fleet's size (see stack.Fleet).
type Fleet struct {
	// TTL is how long a registration lasts without a heartbeat; an
	// instance sends one every TTL/3 (default 15s, at least 300ms).
	TTL time.Duration `mapstructure:"ttl"`
	// Static turns registration off: the fleet's size is
	// store.fleet_size, exactly, as before registration existed.
	Static bool `mapstructure:"static"`
}

// Redis configures the Redis store. Its values are checked whatever the
// store kind; Addrs is required only when Kind is "redis".
type Redis struct {
	// Addrs: one address = standalone; several = cluster; with MasterName
	// set they are sentinels.
	Addrs      []string `mapstructure:"addrs"`
	MasterName string   `mapstructure:"master_name"`
	// Username is the ACL user that authenticates, with the password of
	// PasswordEnv, to the Redis servers (not to the Sentinels); empty
	// means none: the password alone, if any (requirepass).
	Username string `mapstructure:"username"`
	// PasswordEnv names the environment variable holding the password;
	// the password itself never appears in the configuration.
	PasswordEnv string `mapstructure:"password_env"`
	// Timeout is the deadline of one decision (default 25ms, at most 1s).
	Timeout time.Duration `mapstructure:"timeout"`
	// PoolSize is the connection pool size per node (default 64).
	PoolSize int `mapstructure:"pool_size"`
	// KeyPrefix starts every Redis key (default "qg").
	KeyPrefix string `mapstructure:"key_prefix"`
	// BreakerFailures consecutive failures open the circuit breaker
	// (default 5); while open, decisions fail at once without a round trip.
	BreakerFailures int `mapstructure:"breaker_failures"`
	// BreakerCooldown is how long the breaker stays open before one probe
	// is let through (default 1s).
	BreakerCooldown time.Duration `mapstructure:"breaker_cooldown"`
	// TLS, when enabled, connects to every Redis server (and Sentinel)
	// with TLS.
	TLS RedisTLS `mapstructure:"tls"`
}

// RedisTLS configures TLS to Redis. The files are PEM; relative paths are
// relative to the working directory. They are read when the store is
// opened (at start, and on a reload that changes the store section).
type RedisTLS struct {
	// Enabled turns TLS on; the other fields may be set only with it.
	Enabled bool `mapstructure:"enabled"`
	// CAFile holds the CA certificates that may sign the server's
	// certificate; empty means the system's roots.
	CAFile string `mapstructure:"ca_file"`
	// CertFile and KeyFile are the client certificate and key, for servers
	// that authenticate clients (tls-auth-clients); both or neither.
	CertFile string `mapstructure:"cert_file"`
	KeyFile  string `mapstructure:"key_file"`
	// ServerName is the name the server's certificate must carry; empty
	// means the host of each address.
	ServerName string `mapstructure:"server_name"`
}

// Identity says how callers are recognized. At least one of APIKeys, JWT and
// Anonymous must be set.
type Identity struct {
	APIKeys []APIKey `mapstructure:"api_keys"`
	// JWT nil means JWTs are not accepted.
	JWT *JWT `mapstructure:"jwt"`
	// Anonymous nil means a request without a credential is answered 401.
	Anonymous *Anonymous `mapstructure:"anonymous"`
}

// APIKey maps the SHA-256 of an API key to a tenant and tier.
type APIKey struct {
	// KeySHA256 is the lowercase hex SHA-256 of the key (required, 64
	// characters).
	KeySHA256 string `mapstructure:"key_sha256"`
	// Tenant is the key's tenant (required): 1 to 256 bytes without
	// control characters.
	Tenant string `mapstructure:"tenant"`
	// Tier names the key's tier, one of tiers (required).
	Tier string `mapstructure:"tier"`
}

// JWT accepts HS256 bearer tokens.
type JWT struct {
	// SecretEnv names the environment variable holding the HMAC secret. It
	// is required; whether the variable is set is checked at startup.
	SecretEnv string `mapstructure:"secret_env"`
	// TenantClaim names the claim holding the tenant (default "sub").
	TenantClaim string `mapstructure:"tenant_claim"`
	// TierClaim names the claim holding the tier (default "tier").
	TierClaim string `mapstructure:"tier_claim"`
	// ShareTenantsWithAPIKeys makes a JWT whose tenant claim equals an API
	// key's tenant share that tenant's limit state (default false: callers
	// of different credential kinds never share state).
	ShareTenantsWithAPIKeys bool `mapstructure:"share_tenants_with_api_keys"`
	// Issuers are the accepted values of the iss claim. Empty (the
	// default) means iss is not checked; otherwise a token without iss or
	// with another is refused. Entries are compared byte for byte.
	Issuers []string `mapstructure:"issuers"`
	// Audiences are the accepted audiences: the token's aud (a string or a
	// list) must hold at least one. Empty (the default) means aud is not
	// checked; otherwise a token without aud is refused.
	Audiences []string `mapstructure:"audiences"`
	// ClockSkew is the leeway on exp, nbf and iat, for clocks that
	// disagree: left out (or written empty) means DefaultJWTClockSkew; a
	// written 0s means none; at most MaxJWTClockSkew.
	ClockSkew time.Duration `mapstructure:"clock_skew"`
}

// DefaultJWTClockSkew is JWT.ClockSkew when it is left out, and
// MaxJWTClockSkew the largest accepted.
const (
	DefaultJWTClockSkew = 5 * time.Second
	MaxJWTClockSkew     = 5 * time.Minute
)

// Anonymous admits callers without a credential; their identity is the
// client IP.
type Anonymous struct {
	// Tier names the tier of anonymous callers, one of tiers (required).
	Tier string `mapstructure:"tier"`
	// IPv6Prefix is the length in bits of the IPv6 prefix that is one
	// anonymous caller: every address in it shares its limits. 32 to 128;
	// 0 or left out means 64. IPv4 callers are always
	// known by their address.
	IPv6Prefix int `mapstructure:"ipv6_prefix"`
}

// Log configures the process log.
type Log struct {
	// Level is debug, info (the default), warn or error. Read at start
	// only.
	Level LogLevel `mapstructure:"level"`
}

// Tier is a class of callers.
type Tier struct {
	// Local is the stage 1 token bucket per caller per instance; nil means
	// no stage 1 for this tier.
	Local *Limit `mapstructure:"local"`
}

// Limit is a quota. For a token bucket, Rate units refill every Per and at
// most Burst are available at once. For the window algorithms at most Rate
// units fit in any window of length Per, and Burst is 0. It has the fields
// of ratelimit.Limit, so ratelimit.Limit(l) converts it, and its rules are
// ratelimit.Limit.Validate.
type Limit struct {
	// Rate is the units granted per Per (> 0); a concurrency policy
	// leaves it out.
	Rate int64 `mapstructure:"rate"`
	// Per is the refill period of a token bucket, or the window length
	// (> 0, a whole number of microseconds); a calendar window or a
	// concurrency policy leaves it out.
	Per time.Duration `mapstructure:"per"`
	// Burst is a token bucket's capacity, the most units available at
	// once (> 0); the window algorithms and concurrency leave it out.
	Burst int64 `mapstructure:"burst"`
	// Buckets is the number of buckets of a sliding_window (default 10,
	// ratelimit.DefaultBuckets; 0 means the default; at most
	// ratelimit.MaxBuckets, 100).
	Buckets int `mapstructure:"buckets"`
	// Max is the most requests in flight at once of a concurrency policy,
	// which sets no other field (see Policy.StoreLimit).
	Max int64 `mapstructure:"max"`
	// Calendar aligns a fixed_window's windows to local days, weeks or
	// months in place of Per: {unit: day|week|month, time_zone: "Europe/Berlin"}
	// (time_zone defaults to UTC).
	Calendar ratelimit.Calendar `mapstructure:"calendar"`
}

// Dimension is a value read from a request that keys the policies that
// are by it: each of Values gets its own key (and may have its own
// limits, see Policy.Values), and every other value, or none, shares one
// more key, the bucket "*". So a caller cannot create keys by sending
// new values: a policy by a dimension has at most len(Values)+1 keys per
// subject. Exactly one of JSON and Header is set.
type Dimension struct {
	// JSON is a dotted path into the JSON request body, such as model. It
	// is read from the same bounded prefix of the body as a measure's
	// reserve_from.json (that measure's max_body, else 1 MiB), within the
	// gateway's body buffer budget; a body that is not read (not JSON,
	// content-coded, longer, past the budget), or whose value there is
	// not a string of Values (absent, null, a number, stated twice, a
	// key repeated in another case), is the bucket "*".
	JSON string `mapstructure:"json"`
	// Header is a request header, read as reserve_from.header is; a
	// header stated twice is the bucket "*".
	Header string `mapstructure:"header"`
	// Values are the values that get their own key: 1 to
	// MaxDimensionValues of them, each 1 to 64 of [A-Za-z0-9._/@+-],
	// compared ASCII case-insensitively (they are lowercased as the file is read).
	Values []string `mapstructure:"values"`
}

// MaxDimensionValues is the most values of a dimension.
const MaxDimensionValues = 64

// OtherValue names, in keys, replies and explain, the shared bucket of a
// dimension's values that are none of its values.
const OtherValue = "*"

// Policy is a stage 2 limit, enforced fleet-wide.
type Policy struct {
	// Name is the policy's key in Config.Policies; it is shown to clients.
	Name string `mapstructure:"-"`
	// Scope is what one counter covers: tenant (the default),
	// tenant_route, route or global (see routes.ParseScope).
	Scope routes.Scope `mapstructure:"scope"`
	// Algorithm is token_bucket (the default), fixed_window,
	// sliding_window, sliding_log or concurrency (see
	// ratelimit.ParseAlgorithm).
	Algorithm ratelimit.Algorithm `mapstructure:"algorithm"`
	// OnStoreError is what happens when the store cannot decide: open
	// (allow; the default), closed (answer 503) or local (this instance's
	// share of the limit); see ratelimit.ParseOnError.
	OnStoreError ratelimit.OnError `mapstructure:"on_store_error"`
	// Shadow policies decide and record but never deny (default false).
	Shadow bool `mapstructure:"shadow"`
	// Limits holds the limit per tier name; the key "*" applies to every
	// tier without its own entry. A tier with neither is not limited.
	Limits map[string]Limit `mapstructure:"limits"`
	// By names the dimension (at most one) the policy is keyed by in
	// addition to its scope: each value of the dimension is its own
	// counter, and every other value one shared counter (see Dimension).
	By []string `mapstructure:"by"`
	// Values holds limits of single values of the dimension By names, by
	// value, then by tier as Limits does: for a request of that value a
	// tier takes values.<value>.<tier>, else values.<value>."*", else
	// Limits. Only with By; a value must be one of the dimension's.
	Values map[string]map[string]Limit `mapstructure:"values"`
	// Lease, when set, lets each instance reserve blocks of this policy's
	// units and admit from them locally (token_bucket only, never shadow).
	// nil means every decision goes to the store.
	Lease *Lease `mapstructure:"lease"`
	// SlotTTL is, for a concurrency policy, how long a slot stays held
	// when its instance stops renewing it (a crashed instance): default
	// 30s, at least 1s; other algorithms must leave
	// it out.
	SlotTTL time.Duration `mapstructure:"slot_ttl"`
	// Queue, for a concurrency policy, lets a request wait for a slot on
	// this instance instead of an immediate 429; nil means no waiting.
	Queue *Queue `mapstructure:"queue"`
	// Regions, when set, makes the policy one quota across the regions
	// that share store.global (token_bucket only, not shadow); nil means
	// the policy is this region's alone.
	Regions *Regions `mapstructure:"regions"`
}

// StoreLimit returns the store's limit for the tier key of p.Limits (a
// tier name or "*"): the limit as written, and for a concurrency policy with
// Per set to its SlotTTL, the time a slot lives without a renewal. ok is
// false when p has no such key.
func (p Policy) StoreLimit(key string) (l ratelimit.Limit, ok bool) {
	lc, ok := p.Limits[key]
	if !ok {
		return ratelimit.Limit{}, false
	}
	l = ratelimit.Limit(lc)
	if p.Algorithm == ratelimit.Concurrency {
		l.Per = p.SlotTTL
	}
	return l, true
}

// StoreLimitFor returns the store's limit (see StoreLimit) of tier for a
// request whose dimension value is value (OtherValue or "" for none of
// the values): the first of values.<value>.<tier>, values.<value>."*",
// limits.<tier>, limits."*" that is written, and the path of the one
// found below the policy (such as "values.gpt-4o.free"). ok is false when
// none is: the tier is not limited.
func (p Policy) StoreLimitFor(tier, value string) (l ratelimit.Limit, at string, ok bool) {
	for _, key := range [2]string{tier, "*"} {
		if lc, found := p.Values[value][key]; found && value != "" && value != OtherValue {
			l = ratelimit.Limit(lc)
			if p.Algorithm == ratelimit.Concurrency {
				l.Per = p.SlotTTL
			}
			return l, "values." + value + "." + key, true
		}
	}
	for _, key := range [2]string{tier, "*"} {
		if l, ok := p.StoreLimit(key); ok {
			return l, "limits." + key, true
		}
	}
	return ratelimit.Limit{}, "", false
}

// Queue bounds the requests that wait for a concurrency slot, per instance
// and per key (see docs/concepts/concurrency.md).
type Queue struct {
	// Max is the most requests waiting per key on one instance (default
	// 10, >= 1); a request that finds the queue full is answered 429 at
	// once.
	Max int `mapstructure:"max"`
	// Timeout is the longest a request waits before its 429 (default 1s,
	// > 0).
	Timeout time.Duration `mapstructure:"timeout"`
}

// Lease configures block reservation for a hot token-bucket policy (see
// lease.Store). An instance holds at most
// min(MaxBlock, burst/(2×Instances)) units of a key at once; the fleet
// never admits more than the bucket gives out, and may deny early by at
// most (Instances−1) blocks held elsewhere, for at most TTL.
type Lease struct {
	// Auto leases a key only while this instance's own demand on it makes
	// a block pay off, sizing blocks by that demand (see
	// lease.Store). Written `lease: auto`, or `auto: true` in the
	// mapping. Default false.
	Auto bool `mapstructure:"auto"`
	// MaxBlock is the most units one instance reserves at once (default
	// 50; with Auto, default 0: no bound but burst/(2×instances)). Must be
	// >= the cost of every route of the policy; >= 1 unless Auto. The
	// decoder fills in the default when the key is absent.
	MaxBlock int64 `mapstructure:"max_block"`
	// TTL is how long a reserved block may be used; its unused units then
	// go back to the bucket (default 1s).
	TTL time.Duration `mapstructure:"ttl"`
	// Instances is the least number of instances expected to share a hot
	// key; blocks are sized for the larger of it and the live fleet size.
	// Absent or 0 means store.fleet_size.
	Instances int `mapstructure:"instances"`
}

// Upstream is a service requests are forwarded to.
type Upstream struct {
	// Name is the upstream's key in Config.Upstreams.
	Name string `mapstructure:"-"`
	// URL is an absolute http or https URL, or EchoURL (required).
	URL string `mapstructure:"url"`
	// Timeout bounds one forwarded request, response headers included
	// (default 30s).
	Timeout time.Duration `mapstructure:"timeout"`
	// Breaker, when set, answers 503 at once while the upstream keeps
	// failing (see proxy.Breaker); nil means none.
	Breaker *UpstreamBreaker `mapstructure:"breaker"`
	// Shedding, when set, bounds the requests in flight to the upstream
	// with an adaptive limit and sheds the lowest tiers first when it is
	// reached (see proxy.Shedder); nil means none.
	Shedding *Shedding `mapstructure:"shedding"`
}

// UpstreamBreaker configures an upstream's circuit breaker.
type UpstreamBreaker struct {
	// Failures is how many consecutive failed exchanges (connection
	// failures, timeouts, statuses >= 500) open it (default 5, >= 1).
	Failures int `mapstructure:"failures"`
	// Cooldown is how long it stays open before one probe passes
	// (default 5s, > 0).
	Cooldown time.Duration `mapstructure:"cooldown"`
}

// Shedding configures priority shedding for an upstream.
type Shedding struct {
	// TargetLatency is the time to response headers the upstream should
	// keep to; above it the adaptive limit shrinks (required, > 0).
	TargetLatency time.Duration `mapstructure:"target_latency"`
	// Priority lists tier names, most important first: the last is shed
	// first, the first last. Tiers not listed rank below every listed
	// one. Each must be a configured tier, at most once.
	Priority []string `mapstructure:"priority"`
	// MaxInflight caps the adaptive limit (default 1000, >= MinInflight).
	MaxInflight int `mapstructure:"max_inflight"`
	// MinInflight is the least the adaptive limit falls to (default 4, >= 1).
	MinInflight int `mapstructure:"min_inflight"`
}

// EchoURL as an upstream URL selects the built-in demo responder, which
// answers 200 with a small JSON description of the request.
const EchoURL = "echo:"

// Route maps a method and path template to an upstream and policies.
type Route struct {
	// Name is bounded and safe in keys, metrics and spans: 1 to 64 of
	// [a-z0-9_.-], unique (required).
	Name string `mapstructure:"name"`
	// Method is an uppercase HTTP method token, such as GET (required).
	Method string `mapstructure:"method"`
	// Path is a template: "/", or "/" followed by up to 32 non-empty
	// segments separated by "/" (no trailing slash). Each segment is literal
	// text, "{name}" (exactly one segment) or, as the last segment only,
	// "{name...}" (one or more remaining segments). It is required.
	Path string `mapstructure:"path"`
	// Upstream names the upstream the route forwards to, one of upstreams
	// (required, unless the route lists Upstreams: then it is the first
	// of them).
	Upstream string `mapstructure:"upstream"`
	// Upstreams, instead of Upstream and Policies, lists the upstreams a
	// request may go to, in order, each with its own policies (see
	// Candidate): a request is decided against the first; when its
	// policies deny, against the next, and so on; it is denied only when
	// every candidate denies. At most MaxCandidates. The route's
	// Policies are then every candidate's, in order.
	Upstreams []Candidate `mapstructure:"upstreams"`
	// Cost is the units a request takes from stage 1 and from every policy
	// of the route listed by its name alone (default 1). It is written as a
	// number, or as a block (see CostBlock): then Cost is the block's
	// reserve and Settle the block. A block is the route's one measure,
	// named "cost", that every policy listed by its name alone takes
	// (written into Measures and Policies as the file is read), so it cannot be
	// written beside measures.
	Cost int64 `mapstructure:"cost"`
	// Settle is the cost block of a route whose cost is reserved before
	// forwarding and settled from the response; nil for a fixed cost.
	Settle *CostBlock `mapstructure:"-"`
	// Measures are the route's named measures (such as tokens): each is
	// reserved before forwarding and may be settled from the response, and
	// is taken by the policies that name it as their cost. At most
	// MaxMeasures; names are 1 to 32 of [a-z0-9_]. Every measure must be
	// the cost of a policy of the route.
	Measures map[string]Measure `mapstructure:"measures"`
	// Policies are applied in addition to stage 1, all or nothing in one
	// store decision; empty means stage 1 only. Each is written as the
	// policy's name (it takes the route's cost) or as {name: P, cost: C},
	// where C is a whole number of units (>= 1) or the name of one of
	// Measures (see PolicyRef).
	Policies []PolicyRef `mapstructure:"policies"`
	// blockMeasure reports that Normalize wrote Settle into Measures.
	blockMeasure bool
	// candidates reports that Normalize wrote Upstreams into Upstream and
	// Policies; besideUpstream and besidePolicies, that it found Upstream
	// or Policies written beside them, which Validate reports.
	candidates, besideUpstream, besidePolicies bool
	// WebSocket lets a GET of this route upgrade to a WebSocket (default
	// false). No other upgrade is ever forwarded, on any route.
	WebSocket bool `mapstructure:"websocket"`
	// ClientSignals is which rate-limit signals the route's responses
	// carry beyond the gateway's own: "none", or "openai" for the headers
	// and error body OpenAI's SDKs read (retry-after-ms, x-ratelimit-*,
	// x-should-retry; 429 and 400 as {"error": {...}} rather than
	// problem+json). Left out, it is server.client_signals (default
	// none).
	ClientSignals ClientSignals `mapstructure:"client_signals"`
}

// PolicyRef binds a policy to a route with the cost a request takes from
// it. Written as a bare name, it takes the route's cost.
type PolicyRef struct {
	// Name names one of policies (required).
	Name string `mapstructure:"name"`
	// Cost is a whole number of units (>= 1), or the name of a measure of
	// the route, which the policy reserves and is settled by. Left out:
	// the route's cost (its measure "cost" when that is a block). A
	// concurrency policy holds one slot whatever its cost and takes no
	// measure.
	Cost string `mapstructure:"cost"`
	// Units is Cost as a number after Normalize; 0 when Cost is left out
	// (the route's cost) or names a measure.
	Units int64 `mapstructure:"-"`
	// Measure is the measure the policy takes after Normalize; "" for a
	// fixed cost.
	Measure string `mapstructure:"-"`
	// Unsettled is set by Normalize on a policy that takes the measure of a
	// cost block but is not one of its settle_policies: it keeps the
	// reservation.
	Unsettled bool `mapstructure:"-"`
}

// Candidate is one upstream of a route's Upstreams with the policies a
// request forwarded to it takes.
type Candidate struct {
	// Upstream names one of upstreams (required), at most once per route.
	Upstream string `mapstructure:"upstream"`
	// Policies are written as a route's policies are, and decided as they
	// are, all or nothing: a request admitted by a candidate takes from
	// its policies only, and nothing from a candidate that denied it. A
	// policy may be listed by several candidates: it is one bucket. Only
	// the last candidate's concurrency policies may have a queue.
	Policies []PolicyRef `mapstructure:"policies"`
}

// MaxCandidates is the most upstreams a route lists.
const MaxCandidates = 4

// decodeName decodes a policy written by its name alone.
func (p *PolicyRef) decodeName(name string) { p.Name = name }

// MaxMeasures is the most measures one route has.
const MaxMeasures = 8

// Measure is a named quantity of a route's requests (tokens, bytes, ...):
// reserved before forwarding, taken by the policies bound to it, and
// settled with the usage the response reports. Its keys are a cost
// block's (see CostBlock) but settle_policies: a policy is settled by the
// measure it names as its cost.
type Measure struct {
	// Reserve is the units taken before forwarding when the request does
	// not say (>= 1, <= Max); left out, it is Max when ReserveFrom is set
	// and required otherwise.
	Reserve int64 `mapstructure:"reserve"`
	// ReserveFrom is where a request may state its own reservation; nil
	// means none. With JSON set, a request with a body states it there
	// only (Header counts for a request without a body). At most one
	// measure of a route reads the body (json).
	ReserveFrom *ReserveFrom `mapstructure:"reserve_from"`
	// Max is the largest reservation; a request asking more is refused
	// with 400. It is also the reservation of a request whose body does
	// not state ReserveFrom.JSON readably (content-coded, without the
	// field, not JSON, longer than MaxBody). Left out it is Reserve, so
	// one of the two is required. Every policy bound to the measure must
	// be able to hold it.
	Max int64 `mapstructure:"max"`
	// SettleFrom is where the response reports the units used; nil means
	// the reservation is never settled (unless Settle is set).
	SettleFrom *SettleFrom `mapstructure:"settle_from"`
	// Settle is an integer expression over usage fields of the response
	// that the measure settles to, such as
	// "usage.prompt_tokens + usage.completion_tokens" (see usage.Expr:
	// +, -, *, "/" by a constant rounding up, integer constants, JSON
	// paths read from a JSON body or from each event of an SSE stream, the
	// last event holding a field winning, and price(<dimension>).input,
	// .output or .cached, in nano-USD per token, from prices for the
	// request's value of the dimension). It saturates at 2^53; "a - b" is
	// max(a - b, 0) at each subtraction, and there is no unary minus. A
	// response lacking one of its fields settles nothing: the reservation
	// stands.
	// At most MaxSettleFields distinct fields; not with SettleFrom.
	Settle string `mapstructure:"settle"`
	// MaxBody is the most bytes of a JSON body, or of one server-sent
	// event, parsed for a usage (and of a request body for reserve_from
	// json); past it none is found (default 1 MiB, at most 64 MiB).
	MaxBody int64 `mapstructure:"max_body"`
	// OnMissingUsage is what a settled request takes when its usage goes
	// unreported by the caller's doing (see CostBlock.OnMissingUsage):
	// "keep" (the default) or "max". Only with SettleFrom.
	OnMissingUsage MissingUsage `mapstructure:"on_missing_usage"`
	// expr is Settle as Normalize parsed it; nil without Settle, or when
	// it does not parse (which Validate reports).
	expr *usage.Expr
}

// SettleExpr returns the measure's settle expression, parsed once by
// Normalize; nil when the measure has none.
func (m Measure) SettleExpr() *usage.Expr { return m.expr }

// MaxSettleFields is the most distinct fields a measure's settle reads.
const MaxSettleFields = 4

// Price is what a model's tokens cost, as a price list writes it: decimal
// strings of USD per million tokens, such as "2.50", with at most three
// decimals (one nano-USD per token). They are read into nano-USD per
// token exactly, as the file is read: no floating point is involved
// anywhere.
type Price struct {
	// Input is the price of a prompt token (required).
	Input string `mapstructure:"input"`
	// Output is the price of a completion token (required).
	Output string `mapstructure:"output"`
	// Cached is the price of a cached prompt token; left out, Input's.
	Cached string `mapstructure:"cached"`
	// InputNano, OutputNano and CachedNano are the prices in nano-USD
	// per token (1 USD per million tokens = 1000), set by Normalize.
	InputNano  int64 `mapstructure:"-"`
	OutputNano int64 `mapstructure:"-"`
	CachedNano int64 `mapstructure:"-"`
}

// CostBlock is a route cost written as a block: reserved before
// forwarding, then settled with the usage the response reports.
type CostBlock struct {
	// Reserve is the units taken before forwarding when the request does
	// not say (required, >= 1, <= Max).
	Reserve int64 `mapstructure:"reserve"`
	// ReserveFrom is where a request may state its own reservation; nil
	// means none. With JSON set, a request with a body states it there
	// only (Header counts for a request without a body).
	ReserveFrom *ReserveFrom `mapstructure:"reserve_from"`
	// Max is the largest reservation; a request asking more is refused
	// with 400. It is also the reservation of a request whose body does
	// not state ReserveFrom.JSON readably (content-coded, without the
	// field, not JSON, longer than MaxBody), so it is required when
	// ReserveFrom.JSON is set; otherwise it defaults to Reserve. Every
	// policy of the route and every tier's stage 1 must be able to hold
	// it.
	Max int64 `mapstructure:"max"`
	// SettleFrom is where the response reports the units used; nil means
	// the reservation is never settled.
	SettleFrom *SettleFrom `mapstructure:"settle_from"`
	// SettlePolicies are the route's policies that are settled; the others
	// keep the reservation. Empty means every policy of the route
	// (concurrency policies, which hold a slot rather than units, never are).
	SettlePolicies []string `mapstructure:"settle_policies"`
	// MaxBody is the most bytes of a JSON body, or of one server-sent
	// event, parsed for a usage (and of a request body for reserve_from
	// json); past it none is found (default 1 MiB, at most 64 MiB).
	MaxBody int64 `mapstructure:"max_body"`
	// OnMissingUsage is what a settled request takes when its usage goes
	// unreported by the caller's doing: its client went away before the
	// response's usage was whole (before the response, or mid-body before
	// a final usage), or a 2xx response ended without one. "keep" (the
	// default) leaves the reservation; "max" takes Max, or the usage read
	// so far when that is more. Only with SettleFrom.
	OnMissingUsage MissingUsage `mapstructure:"on_missing_usage"`
}

// ReserveFrom names where a request states its reservation.
type ReserveFrom struct {
	// JSON is a dotted path into the JSON request body, such as max_tokens.
	JSON string `mapstructure:"json"`
	// JSONAliases are more paths into the body that the upstream takes
	// for the same limit as JSON, such as max_completion_tokens: a body
	// that states several reserves the largest. Only with JSON.
	JSONAliases []string `mapstructure:"json_aliases"`
	// JSONCount is a path into the body whose value multiplies the
	// reservation stated at JSON, such as n (the number of completions,
	// each up to max_tokens); absent, null or 0 count as 1. Only with
	// JSON.
	JSONCount string `mapstructure:"json_count"`
	// Header is a request header.
	Header string `mapstructure:"header"`
	// PromptBytesPerToken, when > 0, adds to the reservation stated at
	// JSON an upper bound of the prompt's tokens from the body's size:
	// ceil(Content-Length / PromptBytesPerToken) (a tokenizer's token is
	// at least that many bytes of the body; 1 is always safe). The sum is
	// capped at max; a body of unknown length (chunked) reserves max.
	// Only with JSON.
	PromptBytesPerToken int64 `mapstructure:"prompt_bytes_per_token"`
	// Measure, instead of JSON and Header, names another measure of the
	// route whose reserve_from reads the body (json, with
	// prompt_bytes_per_token): this measure then reserves the value of
	// its own Settle on that measure's bounds of the request's tokens,
	// Prompt being ceil(Content-Length / prompt_bytes_per_token),
	// Completion the json field times json_count, and every other field
	// of Settle 0 (a cached prompt token is priced as an input one), at
	// least 1 and at most Max. A request whose body states no bound
	// readably (that measure reserves its max) reserves Max. So a money
	// measure reserves what the longest answer the request allows would
	// cost. Settle must not subtract: only an expression that never
	// decreases when a field grows gives an upper bound on its bounds.
	// Max is required. Only on a route's measures, not a cost block.
	Measure string `mapstructure:"measure"`
	// Prompt is the field of Settle the prompt's bound stands for (only
	// with Measure; left out, usage.prompt_tokens).
	Prompt string `mapstructure:"prompt"`
	// Completion is the field of Settle the completion's bound stands
	// for (only with Measure; left out, usage.completion_tokens).
	Completion string `mapstructure:"completion"`
}

// SettleFrom names where a response reports its usage; the first present
// wins: header (or trailer), then json or sse (by the response's type).
type SettleFrom struct {
	// Header is a response header or trailer.
	Header string `mapstructure:"header"`
	// JSON is a dotted path into a JSON response body, such as
	// usage.total_tokens.
	JSON string `mapstructure:"json"`
	// SSE is a dotted path into the JSON data of the events of a
	// text/event-stream response; the last event that holds it wins.
	SSE string `mapstructure:"sse"`
}

// MaxCostBody is the largest CostBlock.MaxBody.
const MaxCostBody = 64 << 20

// Default returns the configuration an empty file decodes to, before
// validation: every default filled, no tiers, policies, upstreams or routes.
func Default() *Config {
	c := &Config{}
	c.setDefaults()
	return c
}

// defaulter is implemented by the types with defaults. setDefaults fills
// only zero fields, so the decoder calls it on a fresh value before decoding
// into it: a key that is written, even as 0, overrides its default.
type defaulter interface {
	setDefaults()
}

func (c *Config) setDefaults() {
	c.Server.setDefaults()
	c.Store.setDefaults()
	c.Log.setDefaults()
	c.RLS.setDefaults()
}

func (s *Server) setDefaults() {
	setZero(&s.Listen, "127.0.0.1:8080")
	setZero(&s.AdminListen, "127.0.0.1:9090")
	setZero(&s.ReadHeaderTimeout, 5*time.Second)
	setZero(&s.IdleTimeout, 90*time.Second)
	setZero(&s.MaxHeaderBytes, 65536)
	setZero(&s.MaxBodyBytes, 10<<20)
	setZero(&s.BodyReadTimeout, DefaultBodyReadTimeout)
	if s.BodyMinRate == nil {
		r := int64(DefaultBodyMinRate)
		s.BodyMinRate = &r
	}
	setZero(&s.QuotaPath, "/_quota")
	setZero(&s.ShutdownTimeout, 10*time.Second)
	setZero(&s.MaxLocalCallers, 1_000_000)
	setZero(&s.UpstreamExchanges, ExchangesDirect)
	setZero(&s.ClientSignals, ClientSignalsNone)
	if s.HeapFloorBytes == nil {
		floor := int64(DefaultHeapFloorBytes)
		s.HeapFloorBytes = &floor
	}
}

func (s *Store) setDefaults() {
	setZero(&s.Kind, StoreMemory)
	setZero(&s.FleetSize, 1)
	setZero(&s.Fleet.TTL, 15*time.Second)
	s.Redis.setDefaults()
}

func (r *Redis) setDefaults() {
	setZero(&r.Timeout, 25*time.Millisecond)
	setZero(&r.PoolSize, 64)
	setZero(&r.KeyPrefix, "qg")
	setZero(&r.BreakerFailures, 5)
	setZero(&r.BreakerCooldown, time.Second)
}

func (j *JWT) setDefaults() {
	setZero(&j.TenantClaim, "sub")
	setZero(&j.TierClaim, "tier")
	// Filled only on a fresh value, before decoding: a written 0s stays
	// (no leeway).
	setZero(&j.ClockSkew, DefaultJWTClockSkew)
}

func (l *Log) setDefaults() { setZero(&l.Level, LogInfo) }

func (p *Policy) setDefaults() {
	setZero(&p.Scope, routes.ScopeTenant)
	setZero(&p.Algorithm, ratelimit.TokenBucket)
	setZero(&p.OnStoreError, ratelimit.OnErrorOpen)
}

func (l *Lease) setDefaults() {
	setZero(&l.TTL, time.Second)
}

func (q *Queue) setDefaults() {
	setZero(&q.Max, 10)
	setZero(&q.Timeout, time.Second)
}

func (u *Upstream) setDefaults() { setZero(&u.Timeout, 30*time.Second) }

func (b *UpstreamBreaker) setDefaults() {
	setZero(&b.Failures, 5)
	setZero(&b.Cooldown, 5*time.Second)
}

func (s *Shedding) setDefaults() {
	setZero(&s.MaxInflight, 1000)
	setZero(&s.MinInflight, 4)
}

func (r *Route) setDefaults() { setZero(&r.Cost, 1) }

func setZero[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}
