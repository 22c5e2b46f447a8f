package gateway

import (
	"fmt"
	"net/http"
	"net/url"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/identity"
	"github.com/quotagate/quotagate/proxy"
	"github.com/quotagate/quotagate/ratelimit/local"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/routes"
	"golang.org/x/time/rate"
)

// pipeline is everything one configuration compiles to. It is immutable once
// built; a reload builds a new one and swaps it in whole, so a request sees
// one configuration from its first stage to its last.
type pipeline struct {
	cfg    *config.Config
	table  *routes.Table
	routes []*route // by routes.Match.Index
	auth   *identity.Authenticator
	tiers  map[string]*local.Set // stage 1 per tier; absent = no stage 1
	store  *stack.Stack
	// inlineRelease is whether held slots are given back in the
	// request's goroutine: true for the memory store, which waits on no
	// I/O (see slotState.hold).
	inlineRelease bool
	// breakers are the upstream circuit breakers by upstream name.
	breakers map[string]*proxy.Breaker
	// shedders are the upstreams' priority shedders by upstream name.
	shedders map[string]*proxy.Shedder
	// body is the limits every request body is read under.
	body    bodyLimits
	handler http.Handler
	// quotaReads bounds how often each caller may read the quota endpoint,
	// which costs a store call: see quotaReadRate.
	quotaReads *local.Set
	// readBudget is the gateway-wide budget of quota endpoint reads,
	// set by quotaEndpoint (see quotaBudget).
	readBudget *quotaBudget
	// subjectIDs are the SubjectIDs of the configured API keys' subjects,
	// hashed once here rather than on every request; see subjectID.
	subjectIDs map[string]routes.SubjectID
}

// subjectID returns routes.NewSubjectID(subject), looked up for the subject
// of a configured API key and hashed for any other (JWT and anonymous
// callers). The map is only read once the pipeline is built.
func (p *pipeline) subjectID(subject string) routes.SubjectID {
	if id, ok := p.subjectIDs[subject]; ok {
		return id
	}
	return routes.NewSubjectID(subject)
}

// buildPipeline compiles cfg. prev, when not nil, is the pipeline being
// replaced: stage-1 limiter sets of tiers whose local limit did not change
// are carried over so callers keep their state across a reload. gw
// settles the reservations of the requests its proxies forward; nil for a
// pipeline that serves nothing (Explain).
func buildPipeline(cfg *config.Config, prev *pipeline, store *stack.Stack, o *Options, gw *Gateway) (*pipeline, error) {
	p := &pipeline{cfg: cfg, store: store, inlineRelease: cfg.Store.Kind == config.StoreMemory, body: bodyLimits{max: cfg.Server.MaxBodyBytes,
		timeout: cfg.Server.BodyReadTimeout, minRate: derefZero(cfg.Server.BodyMinRate)}}
	if prev != nil && prev.quotaReads != nil {
		p.quotaReads = prev.quotaReads
	} else {
		p.quotaReads = local.New(local.Options{Rate: quotaReadRate, Burst: quotaReadBurst, MaxLimiters: cfg.Server.MaxLocalCallers})
	}

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
	keySubjects := auth.KeySubjects()
	p.subjectIDs = make(map[string]routes.SubjectID, len(keySubjects))
	for _, s := range keySubjects {
		p.subjectIDs[s] = routes.NewSubjectID(s)
	}

	p.tiers = make(map[string]*local.Set, len(cfg.Tiers))
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
		p.tiers[name] = local.New(local.Options{Rate: lim, Burst: burst, MaxLimiters: cfg.Server.MaxLocalCallers})
	}

	if p.breakers, err = upstreamGuards(cfg, prev, o); err != nil {
		return nil, err
	}
	if p.shedders, err = upstreamShedders(cfg, prev, o); err != nil {
		return nil, err
	}
	proxies := make(map[string]http.Handler, len(cfg.Upstreams))
	for name, u := range cfg.Upstreams {
		target, err := url.Parse(u.URL)
		if err != nil {
			return nil, fmt.Errorf("upstreams.%s.url: %w", name, err)
		}
		h, err := proxy.New(proxy.Upstream{Name: name, URL: target, Timeout: u.Timeout}, proxy.Options{
			Transport: o.Transport,
			Observer:  upstreamObserver{gw: gw, upstream: name, metrics: o.Metrics},
			Logger:    o.Logger,
			Breaker:   p.breakers[name],
			Shedder:   p.shedders[name],
		})
		if err != nil {
			return nil, fmt.Errorf("upstreams.%s: %w", name, err)
		}
		proxies[name] = h
	}

	if p.routes, err = compileRoutes(cfg, proxies); err != nil {
		return nil, err
	}
	attachSeries(p.routes, o.Metrics)
	return p, nil
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
			// A config problem like the admin token's (exit 1 at start).
			return nil, config.Errors{{Path: "identity.jwt.secret_env", Problem: "environment variable " + j.SecretEnv + " is not set"}}
		}
		ic.JWT = &identity.JWTConfig{Secret: []byte(secret), TenantClaim: j.TenantClaim, TierClaim: j.TierClaim,
			Leeway: j.ClockSkew, Issuers: j.Issuers, Audiences: j.Audiences}
		ic.ShareKeyAndJWTTenants = j.ShareTenantsWithAPIKeys
	}
	if a := cfg.Identity.Anonymous; a != nil {
		ic.AnonymousTier, ic.AnonymousIPv6Prefix = a.Tier, a.IPv6Prefix
	}
	return identity.New(ic)
}

// derefZero returns *p, or 0 for nil.
func derefZero(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}
