package gateway

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/routes"
	"github.com/quotagate/quotagate/telemetry"
	"github.com/quotagate/quotagate/usage"
)

// route is one configured route, compiled.
type route struct {
	name  string
	cost  int64
	proxy http.Handler
	// byTier holds the route's policies that limit a tier, and anyTier,
	// for the tiers not in byTier, those with a "*" limit: one of each
	// per value of the route's dimension, the shared bucket last (see
	// policyFor); one without a dimension.
	byTier  []map[string][]boundPolicy
	anyTier [][]boundPolicy
	// dim is the dimension the route's policies are keyed by; its zero
	// value (no label) for none.
	dim routeDimension
	// websocket lets a request of this route upgrade to a WebSocket.
	websocket bool
	// measures are the route's measures, ordered by name; localMeasure is
	// the index of the one stage 1 takes (a cost block's), -1 when stage 1
	// takes cost.
	measures     []*measure
	localMeasure int
	// upstream is the route's series of the upstream duration.
	upstream telemetry.RouteSeries
	// signals is the route's client_signals (see signals.go).
	signals config.ClientSignals
	// upstreamName is the upstream of this candidate of a route that
	// lists upstreams ("" for a route with one upstream), and fallback
	// the next candidate: the same route with its own upstream and
	// policies, decided when this one's deny; nil for the last.
	upstreamName string
	fallback     *route
}

// routeDimension is the dimension of a route's policies.
type routeDimension struct {
	name  string
	label usage.Label
}

// policyFor returns the stage-2 policies of r that apply to tier for a
// request whose dimension value is v (an index into the dimension's
// values, or usage.Other), ordered with shared (route, global) scopes
// first and the tenant's slot last.
func (r *route) policyFor(tier string, v int) []boundPolicy {
	i := v
	if v < 0 || v >= len(r.dim.label.Values) {
		i = len(r.dim.label.Values) // the shared bucket; 0 without a dimension
	}
	if ps, ok := r.byTier[i][tier]; ok {
		return ps
	}
	return r.anyTier[i]
}

// eachBinding calls f with every binding of r's policies: per candidate,
// per value of its dimension, per tier, then for the tiers only "*"
// limits.
func (r *route) eachBinding(f func(ps []boundPolicy)) {
	for c := r; c != nil; c = c.fallback { // and every candidate's
		for i := range c.anyTier {
			for _, tier := range slices.Sorted(maps.Keys(c.byTier[i])) {
				f(c.byTier[i][tier])
			}
			f(c.anyTier[i])
		}
	}
}

// dimensionValue is the value, in keys and replies, of index i of the
// route's dimension values: the value, or config.OtherValue for the
// shared bucket; "" without a dimension.
func (r *route) dimensionValue(i int) string {
	switch {
	case r.dim.name == "":
		return ""
	case i < len(r.dim.label.Values):
		return r.dim.label.Values[i]
	}
	return config.OtherValue
}

// boundPolicy is a policy with the limit of one tier on one route: every
// value the request path needs, typed and checked once per configuration.
type boundPolicy struct {
	name      string
	scope     routes.Scope
	algorithm ratelimit.Algorithm
	onError   ratelimit.OnError
	shadow    bool
	lease     ratelimit.Lease  // zero = not leased
	region    ratelimit.Region // zero = this region's alone
	// queue, for a concurrency policy with a queue, is how requests wait
	// for a slot; nil = a denial is answered at once.
	queue *slotQueueSpec
	// pattern builds the policy's store key for a subject, everything but
	// the subject's hash prepared once per configuration.
	pattern routes.KeyPattern
	limit   ratelimit.Limit
	// share is this instance's part of limit, which the store's Fallback
	// enforces when the store fails and onError is OnErrorLocal; it is
	// kept to advertise it and checked at compile time.
	share ratelimit.Limit
	// quota and window are what RateLimit-Policy advertises: q units per w
	// seconds; shareQuota and shareWindow the same for share.
	quota, window           int64
	shareQuota, shareWindow int64
	// shareFleet and shareCost are the fleet size and route cost share was
	// computed for (see shareView).
	shareFleet, shareCost int64
	// series are the policy's decision counts in the global stage.
	series policySeries
	// measure is the index in the route's measures of the measure a
	// request takes from this policy; -1 for the fixed cost units.
	// settles reports whether the measure's usage settles it.
	measure int
	units   int64
	settles bool
	// by is the dimension value of the policy's keys, such as
	// "model=gpt-4o" (model=* for the shared bucket); "" for a policy
	// not keyed by a dimension.
	by string
}

// cost is what a request that reserved reserved (per measure) takes from
// bp: one slot of a concurrency policy, its measure's reservation, or its
// fixed units.
func (bp *boundPolicy) cost(reserved *[config.MaxMeasures]int64) int64 {
	switch {
	case bp.algorithm == ratelimit.Concurrency:
		return 1
	case bp.measure >= 0:
		return reserved[bp.measure]
	}
	return bp.units
}

// compileRoutes binds every route of cfg to its upstream's handler and
// to its stage-2 policies per tier. cfg must have passed Validate, and
// compileRoutes trusts it: every policy, upstream and measure a route
// names exists, every enum is valid, every limit and cost is one the
// store accepts (config's validateRoutes holds each cost to each limit's
// capacity, and a valid limit's local share is valid too, see
// stack.LocalShare). It applies no defaults and re-checks nothing; its
// only errors are those of building keys (routes.NewKeyPattern).
func compileRoutes(cfg *config.Config, proxies map[string]http.Handler) ([]*route, error) {
	fleet := int64(cfg.Store.FleetSize)
	tierNames := make([]string, 0, len(cfg.Tiers))
	for name := range cfg.Tiers {
		tierNames = append(tierNames, name)
	}
	slices.Sort(tierNames)

	out := make([]*route, len(cfg.Routes))
	for i, rc := range cfg.Routes {
		path := fmt.Sprintf("routes[%d]", i)
		r := &route{name: rc.Name, cost: rc.Cost, proxy: proxies[rc.Upstream], websocket: rc.WebSocket, signals: rc.ClientSignals}
		dims := rc.SettleDimensions()
		for _, ref := range rc.Policies {
			if by := cfg.Policies[ref.Name].By; len(by) > 0 {
				dims = append([]string{by[0]}, dims...)
			}
		}
		if len(dims) > 0 {
			d := cfg.Dimensions[dims[0]]
			r.dim = routeDimension{name: dims[0], label: usage.Label{JSON: d.JSON, Header: d.Header, Values: d.Values}}
		}
		var err error
		if r.measures, r.localMeasure, err = compileMeasures(cfg, rc, r.dim.label.Values); err != nil {
			return nil, fmt.Errorf("%s.%w", path, err)
		}
		cands := rc.Upstreams
		if len(cands) == 0 {
			cands = []config.Candidate{{Upstream: rc.Upstream, Policies: rc.Policies}}
		}
		base, at := *r, &r
		for _, cd := range cands {
			c := *at
			if c == nil { // the next candidate: the route with its own upstream and policies
				c = new(route)
				*c = base
				*at = c
			}
			one := rc
			one.Policies = cd.Policies
			if err := c.bindTiers(cfg, one, tierNames, fleet); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			c.proxy = proxies[cd.Upstream]
			if len(rc.Upstreams) > 0 {
				c.upstreamName = cd.Upstream
			}
			at = &c.fallback
		}
		out[i] = r
	}
	return out, nil
}

// bindTiers binds the policies of rc to r per value of r's dimension and
// per tier.
func (r *route) bindTiers(cfg *config.Config, rc config.Route, tierNames []string, fleet int64) error {
	for v := range len(r.dim.label.Values) + 1 {
		value := r.dimensionValue(v)
		byTier := make(map[string][]boundPolicy, len(tierNames))
		for _, tier := range tierNames {
			ps, err := bindPolicies(cfg, rc, r.measures, tier, value, fleet)
			if err != nil {
				return err
			}
			byTier[tier] = ps
		}
		anyTier, err := bindPolicies(cfg, rc, r.measures, "", value, fleet)
		if err != nil {
			return err
		}
		r.byTier, r.anyTier = append(r.byTier, byTier), append(r.anyTier, anyTier)
	}
	return nil
}

// bindPolicies resolves the policies of route rc, whose compiled measures
// are ms, for tier ("" = a tier that only "*" limits) and a request whose
// dimension value is value ("" without a dimension, config.OtherValue
// for the shared bucket), and orders them shared scopes first, tenant
// scopes last. A policy without a limit for the tier (nor "*") does not
// limit it. A policy by the dimension has the value's limit and keys.
func bindPolicies(cfg *config.Config, rc config.Route, ms []*measure, tier, value string, fleet int64) ([]boundPolicy, error) {
	var shared, tenant []boundPolicy
	for _, ref := range rc.Policies {
		name := ref.Name
		pc := cfg.Policies[name]
		byValue := ""
		if len(pc.By) > 0 {
			byValue = value
		}
		lim, at, ok := pc.StoreLimitFor(tier, byValue)
		if !ok {
			continue // this tier is not limited by this policy
		}
		bp, err := bindPolicy(cfg, ref, pc, lim, rc, ms, fleet)
		if err == nil && byValue != "" {
			bp.by = pc.By[0] + "=" + byValue
			bp.pattern, err = bp.pattern.By(bp.by)
		}
		if err != nil {
			return nil, fmt.Errorf("policies.%s.%s: %w", name, at, err)
		}
		if bp.scope.PerSubject() {
			tenant = append(tenant, bp)
		} else {
			shared = append(shared, bp)
		}
	}
	return append(shared, tenant...), nil
}

// bindPolicy compiles policy pc, bound to route rc by ref, with limit lim.
// Its local share is computed for the largest cost a request takes from
// it: its measure's max, or its fixed units.
func bindPolicy(cfg *config.Config, ref config.PolicyRef, pc config.Policy, lim ratelimit.Limit, rc config.Route, ms []*measure, fleet int64) (boundPolicy, error) {
	name := ref.Name
	alg := pc.Algorithm
	bp := boundPolicy{
		name: name, scope: pc.Scope, algorithm: alg, onError: pc.OnStoreError, shadow: pc.Shadow,
		limit: lim, measure: measureIndex(ms, ref.Measure), settles: !ref.Unsettled,
	}
	cost := ref.Units
	if cost == 0 && ref.Measure == "" {
		cost = rc.Cost // a policy listed by its name takes the route's cost
	}
	bp.units = cost
	switch {
	case alg == ratelimit.Concurrency:
		cost, bp.measure, bp.settles = 1, -1, false // a request holds one slot, whatever its cost
	case bp.measure >= 0:
		cost = ms[bp.measure].max
	default:
		bp.settles = false // a fixed cost is never settled
	}
	bp.share, bp.shareFleet, bp.shareCost = stack.LocalShare(lim, alg, fleet, cost), fleet, cost
	if l := pc.Lease; l != nil {
		bp.lease = ratelimit.Lease{MaxBlock: l.MaxBlock, Auto: l.Auto, TTL: l.TTL, Instances: l.Instances}
	}
	if r := pc.Regions; r != nil {
		bp.region = ratelimit.Region{Leased: true, SafeShare: r.SafeShare, Policy: name}
	}
	if q := pc.Queue; q != nil && alg == ratelimit.Concurrency {
		bp.queue = &slotQueueSpec{max: q.Max, timeout: q.Timeout}
	}
	var err error
	if bp.pattern, err = routes.NewKeyPattern(cfg.Store.Redis.KeyPrefix, pc.Scope, name, alg.String(), rc.Name); err != nil {
		return boundPolicy{}, err
	}
	bp.quota, bp.window = advertised(bp.limit, alg)
	bp.shareQuota, bp.shareWindow = advertised(bp.share, alg)
	return bp, nil
}

// advertised returns the quota and window (whole seconds, at least 1) that
// RateLimit-Policy shows: for a token bucket the burst and the time to refill
// it from empty; for windows the rate and the window length; for concurrency
// the most requests in flight and no window (0).
func advertised(l ratelimit.Limit, alg ratelimit.Algorithm) (quota, window int64) {
	if alg == ratelimit.Concurrency {
		return l.Max, 0
	}
	if alg == ratelimit.TokenBucket {
		refill := time.Duration(float64(l.Per) * float64(l.Burst) / float64(l.Rate))
		return l.Burst, ceilSeconds(refill)
	}
	if l.Calendar.Set() {
		// The window's real length varies; the response shows the time to
		// its end (see calendarWindow).
		return l.Rate, ceilSeconds(l.Calendar.MaxLength())
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
