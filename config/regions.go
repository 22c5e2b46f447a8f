package config

import (
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

// Global configures the global owner of cross-region policies: a Redis
// that every region reports to (never on a request's path), and how often
// and for how long grants are made.
type Global struct {
	// Redis is the global Redis (Redis 7 or later; standalone, Sentinel,
	// or a Cluster, where one primary holds every key of the owner). Its
	// Timeout bounds one report (here at most 5s, since it
	// is never on a request's path; default 300ms); Addrs is required.
	Redis Redis `mapstructure:"redis"`
	// ReportInterval is how often a region's reporter reports its demand
	// and receives its grants (default 1s, at least 50ms).
	ReportInterval time.Duration `mapstructure:"report_interval"`
	// LeaseTTL is how long a grant lasts without a new report: while the
	// global Redis cannot be reached, a region keeps its last grant that
	// long, then falls to each policy's safe_share (default 5s, at least
	// 3 × report_interval + redis.timeout, so that a dead reporter is
	// replaced within it).
	LeaseTTL time.Duration `mapstructure:"lease_ttl"`
}

func (g *Global) setDefaults() {
	setZero(&g.Redis.Timeout, 300*time.Millisecond)
	g.Redis.setDefaults()
	setZero(&g.ReportInterval, time.Second)
	setZero(&g.LeaseTTL, 5*time.Second)
}

// Regions marks a policy as one quota across regions.
type Regions struct {
	// Mode is how the quota is shared: leased (the only mode: each region
	// is granted a share by its demand; required).
	Mode RegionsMode `mapstructure:"mode"`
	// SafeShare is the fraction of the limit, in [0, 1], a region decides
	// on while it holds no grant (partitioned from the global Redis past
	// lease_ttl, or the key not granted yet). 0 (the default) denies, as
	// on_store_error: closed does.
	SafeShare float64 `mapstructure:"safe_share"`
}

// RegionsMode is a policy's regions.mode.
type RegionsMode string

// RegionsLeased grants each region a share of the limit by its demand.
const RegionsLeased RegionsMode = "leased"

// UnmarshalText sets m from "leased".
func (m *RegionsMode) UnmarshalText(b []byte) error { return setEnum(m, b, RegionsLeased) }

// validateRegions checks store.region, store.global and the policies'
// regions.
func (c *Config) validateRegions(errs *Errors) {
	s := &c.Store
	if s.Region != "" && !nameRE.MatchString(s.Region) {
		errs.add("store.region", "region name "+nameRule)
	}
	if g := s.Global; g != nil {
		if s.Region == "" {
			errs.add("store.region", "must name this instance's region when store.global is set")
		}
		if s.Kind != StoreRedis {
			errs.add("store.kind", `must be "redis" when store.global is set: a region decides on its own Redis`)
		}
		if len(g.Redis.Addrs) == 0 {
			errs.add("store.global.redis.addrs", "must list at least one host:port")
		}
		for i, a := range g.Redis.Addrs {
			if _, err := hostPort(a, false); err != nil {
				errs.add(index("store.global.redis.addrs", i), err.Error())
			}
		}
		positive(errs, "store.global.redis.timeout", g.Redis.Timeout)
		if g.Redis.Timeout > 5*time.Second {
			errs.addf("store.global.redis.timeout", "must be at most 5s, got %s", g.Redis.Timeout)
		}
		positive(errs, "store.global.redis.pool_size", g.Redis.PoolSize)
		if !keyPrefixRE.MatchString(g.Redis.KeyPrefix) {
			errs.addf("store.global.redis.key_prefix", "must be 1 to 32 characters of A-Z, a-z, 0-9, '_', '.', ':' and '-', got %q", g.Redis.KeyPrefix)
		}
		validateRedisTLS(errs, "store.global.redis.tls", g.Redis.TLS)
		if g.Redis.PasswordEnv != "" && !envNameRE.MatchString(g.Redis.PasswordEnv) {
			errs.addf("store.global.redis.password_env", "must name an environment variable, got %q", g.Redis.PasswordEnv)
		}
		if g.ReportInterval < 50*time.Millisecond {
			errs.addf("store.global.report_interval", "must be >= 50ms, got %s", g.ReportInterval)
		}
		if least := 3*g.ReportInterval + g.Redis.Timeout; g.LeaseTTL < least {
			errs.addf("store.global.lease_ttl", "must be >= 3 × report_interval + redis.timeout (%s), got %s: a dead reporter is replaced within it", least, g.LeaseTTL)
		}
	}
	for name, pol := range c.Policies {
		r := pol.Regions
		if r == nil {
			continue
		}
		p := join("policies", name) + ".regions"
		if err := checkEnum(r.Mode, RegionsLeased); err != nil {
			errs.add(p+".mode", err.Error())
		}
		if !(r.SafeShare >= 0 && r.SafeShare <= 1) {
			errs.addf(p+".safe_share", "must be in [0, 1], got %v", r.SafeShare)
		}
		if s.Global == nil {
			errs.add(p, "needs store.global: the owner that grants each region its share")
		}
		if pol.Algorithm != ratelimit.TokenBucket {
			errs.addf(p, "only token_bucket policies can be shared across regions, not %s", pol.Algorithm)
		}
		if pol.Shadow {
			errs.add(p, "a shadow policy cannot be shared across regions")
		}
		for tier, l := range pol.Limits {
			if l.Rate > ratelimit.MaxRegionUnits || l.Burst > ratelimit.MaxRegionUnits {
				errs.addf(join(join("policies", name)+".limits", tier), "rate and burst must be at most %d for a policy shared across regions", ratelimit.MaxRegionUnits)
			}
		}
	}
}
