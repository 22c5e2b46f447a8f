package gateway

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"time"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/identity"
	"github.com/quotagate/quotagate/proxy"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/routes"
	"golang.org/x/time/rate"
)

// pipeline is everything one configuration compiles to. It is immutable once
// built; a reload builds a new one and swaps it in whole, so a request sees
// one configuration from its first stage to its last.
type pipeline struct {
	cfg     *config.Config
	table   *routes.Table
	routes  []*route // by routes.Match.Index
	auth    *identity.Authenticator
	tiers   map[string]*ratelimit.LocalSet // stage 1 per tier; absent = no stage 1
	backend *Backend
	maxBody int64
	handler http.Handler
}

// route is one configured route, compiled.
type route struct {
	name    string
	cost    int64
	proxy   http.Handler
	byTier  map[string][]boundPolicy // the route's policies that limit a tier
	anyTier []boundPolicy            // for tiers not in byTier: policies with a "*" limit
}

// policyFor returns the stage-2 policies of r that apply to tier, ordered
// with shared (route, global) scopes first and the tenant's slot last.
func (r *route) policyFor(tier string) []boundPolicy {
	if ps, ok := r.byTier[tier]; ok {
		return ps
	}
	return r.anyTier
}

// boundPolicy is a policy with the limit of one tier.
type boundPolicy struct {
	name      string
	scope     routes.Scope
	algorithm ratelimit.Algorithm
	onError   string // open | closed | local
	shadow    bool
	lease     ratelimit.Lease // zero = not leased
	// pattern builds the policy's store key for a subject, everything but
	// the subject's hash prepared once per configuration.
	pattern routes.KeyPattern
	limit   ratelimit.Limit
	// share is this instance's part of limit, used when the store fails and
	// onError is "local".
	share ratelimit.Limit
	// quota and window are what RateLimit-Policy advertises: q units per w seconds.
	quota, window int64
}

// buildPipeline compiles cfg. prev, when not nil, is the pipeline being
// replaced: stage-1 limiter sets of tiers whose local limit did not change
// are carried over so callers keep their state across a reload.
func buildPipeline(cfg *config.Config, prev *pipeline, backend *Backend, o *Options) (*pipeline, error) {
	p := &pipeline{cfg: cfg, backend: backend, maxBody: cfg.Server.MaxBodyBytes}

	specs := make([]routes.Spec, len(cfg.Routes))
	for i, r := range cfg.Routes {
		specs[i] = routes.Spec{Name: r.Name, Method: r.Method, Path: r.Path}
	}
	table, err := routes.NewTable(specs)
	if err != nil {
		return nil, err
	}
	p.table = table

	auth, err := newAuthenticator(cfg, o)
	if err != nil {
		return nil, err
	}
	p.auth = auth

	p.tiers = make(map[string]*ratelimit.LocalSet, len(cfg.Tiers))
	for name, t := range cfg.Tiers {
		if t.Local == nil {
			continue
		}
		lim := rate.Limit(float64(t.Local.Rate) / t.Local.Per.Seconds())
		burst := int(t.Local.Burst)
		if prev != nil {
			if old, ok := prev.tiers[name]; ok {
				if ol, ob := old.Limit(); ol == lim && ob == burst {
					p.tiers[name] = old
					continue
				}
			}
		}
		p.tiers[name] = ratelimit.NewLocalSet(ratelimit.LocalOptions{Rate: lim, Burst: burst, MaxLimiters: cfg.Server.MaxLocalCallers})
	}

	proxies := make(map[string]http.Handler, len(cfg.Upstreams))
	for name, u := range cfg.Upstreams {
		target, err := url.Parse(u.URL)
		if err != nil {
			return nil, fmt.Errorf("upstreams.%s.url: %w", name, err)
		}
		h, err := proxy.New(proxy.Upstream{Name: name, URL: target, Timeout: u.Timeout}, proxy.Options{
			Transport:  o.Transport,
			WriteError: writeProxyError,
			Logger:     o.Logger,
		})
		if err != nil {
			return nil, fmt.Errorf("upstreams.%s: %w", name, err)
		}
		proxies[name] = h
	}

	fleet := int64(cfg.Store.FleetSize)
	if fleet < 1 {
		fleet = 1
	}
	tierNames := make([]string, 0, len(cfg.Tiers))
	for name := range cfg.Tiers {
		tierNames = append(tierNames, name)
	}
	sort.Strings(tierNames)

	p.routes = make([]*route, len(cfg.Routes))
	for i, rc := range cfg.Routes {
		r := &route{name: rc.Name, cost: rc.Cost, proxy: proxies[rc.Upstream], byTier: map[string][]boundPolicy{}}
		if r.cost < 1 {
			r.cost = 1
		}
		for _, tier := range tierNames {
			if r.byTier[tier], err = bindPolicies(cfg, rc.Policies, tier, fleet, r.cost, rc.Name); err != nil {
				return nil, err
			}
		}
		if r.anyTier, err = bindPolicies(cfg, rc.Policies, "", fleet, r.cost, rc.Name); err != nil {
			return nil, err
		}
		p.routes[i] = r
	}
	return p, nil
}

// bindPolicies resolves the named policies for tier ("" = a tier that only
// "*" limits) and orders them shared scopes first, tenant scopes last.
func bindPolicies(cfg *config.Config, names []string, tier string, fleet, cost int64, routeName string) ([]boundPolicy, error) {
	var shared, tenant []boundPolicy
	for _, name := range names {
		pc, ok := cfg.Policies[name]
		if !ok {
			continue // validation guarantees this does not happen
		}
		lc, ok := pc.Limits[tier]
		if !ok {
			if lc, ok = pc.Limits["*"]; !ok {
				continue // this tier is not limited by this policy
			}
		}
		alg, err := ratelimit.ParseAlgorithm(pc.Algorithm)
		if err != nil {
			continue
		}
		scope, err := routes.ParseScope(pc.Scope)
		if err != nil {
			continue
		}
		bp := boundPolicy{
			name: name, scope: scope, algorithm: alg, onError: pc.OnStoreError, shadow: pc.Shadow,
			limit: ratelimit.Limit{Rate: lc.Rate, Per: lc.Per, Burst: lc.Burst},
		}
		if l := pc.Lease; l != nil {
			bp.lease = ratelimit.Lease{MaxBlock: l.MaxBlock, TTL: l.TTL, Instances: l.Instances}
		}
		bp.share = localShare(bp.limit, alg, fleet, cost)
		if bp.pattern, err = routes.NewKeyPattern(keyPrefix(cfg), scope, name, alg.String(), routeName); err != nil {
			return nil, fmt.Errorf("routes[%s] policy %s: %w", routeName, name, err)
		}
		bp.quota, bp.window = advertised(bp.limit, alg)
		if scope == routes.ScopeTenant || scope == routes.ScopeTenantRoute {
			tenant = append(tenant, bp)
		} else {
			shared = append(shared, bp)
		}
	}
	return append(shared, tenant...), nil
}

// keyPrefix is the first part of every store key (store.redis.key_prefix).
func keyPrefix(cfg *config.Config) string {
	if p := cfg.Store.Redis.KeyPrefix; p != "" {
		return p
	}
	return "qg"
}

// localShare is this instance's part of a fleet-wide limit: the rate and
// burst divided by the fleet size, rounded up so that a share is never zero,
// and a capacity never below the route's cost (a request the full limit
// could admit stays admissible). Rounding up means a fleet that falls back
// all at once admits at most fleet-1 units more than the limit per period.
func localShare(l ratelimit.Limit, alg ratelimit.Algorithm, fleet, cost int64) ratelimit.Limit {
	div := func(v int64) int64 {
		if v == 0 {
			return 0
		}
		return (v + fleet - 1) / fleet
	}
	s := ratelimit.Limit{Rate: div(l.Rate), Per: l.Per, Burst: div(l.Burst)}
	if alg == ratelimit.TokenBucket {
		s.Burst = max(s.Burst, cost)
	} else {
		s.Rate = max(s.Rate, cost)
	}
	return s
}

// advertised returns the quota and window (whole seconds, at least 1) that
// RateLimit-Policy shows: for a token bucket the burst and the time to refill
// it from empty; for windows the rate and the window length.
func advertised(l ratelimit.Limit, alg ratelimit.Algorithm) (quota, window int64) {
	if alg == ratelimit.TokenBucket {
		refill := time.Duration(float64(l.Per) * float64(l.Burst) / float64(l.Rate))
		return l.Burst, ceilSeconds(refill)
	}
	return l.Rate, ceilSeconds(l.Per)
}

// ceilSeconds rounds d up to whole seconds, with a minimum of 1.
func ceilSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return s
}

// newAuthenticator builds the identity stage from cfg. The JWT secret is read
// from the environment variable the config names; an empty or missing one is
// an error, not a gateway that accepts any token.
func newAuthenticator(cfg *config.Config, o *Options) (*identity.Authenticator, error) {
	ic := identity.Config{TrustedProxies: cfg.Server.TrustedPrefixes, Now: o.Now, Tiers: map[string]bool{}}
	for name := range cfg.Tiers {
		ic.Tiers[name] = true
	}
	for _, k := range cfg.Identity.APIKeys {
		ic.APIKeys = append(ic.APIKeys, identity.APIKey{SHA256Hex: k.KeySHA256, Tenant: k.Tenant, Tier: k.Tier})
	}
	if j := cfg.Identity.JWT; j != nil {
		secret, ok := o.Getenv(j.SecretEnv)
		if !ok || secret == "" {
			return nil, fmt.Errorf("identity.jwt.secret_env: environment variable %s is not set", j.SecretEnv)
		}
		ic.JWT = &identity.JWTConfig{Secret: []byte(secret), TenantClaim: j.TenantClaim, TierClaim: j.TierClaim, Leeway: 5 * time.Second}
		ic.ShareKeyAndJWTTenants = j.ShareTenantsWithAPIKeys
	}
	if a := cfg.Identity.Anonymous; a != nil {
		ic.AnonymousTier = a.Tier
	}
	return identity.New(ic)
}
