package config

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/usage"
)

// DefaultSlotTTL is a concurrency policy's slot_ttl when it is left out.
const DefaultSlotTTL = 30 * time.Second

// Normalize puts c into the one form the packages reading it rely on. It
// is the only step after decoding (which fills the defaults of every key
// left out) that changes a Config, and Validate, which checks the result,
// changes nothing. Load runs both; so do gateway.New and Reload, for a
// Config built in code.
//
// Normalize never fails: what it cannot derive (a price or a trusted proxy
// that does not parse, a cost that names nothing) it leaves at its zero
// value for Validate to report. It is idempotent. It
//
//   - sets Policy.Name and Upstream.Name from their keys;
//   - lowercases every reference (tiers, policies, upstreams, dimensions,
//     settle_policies, shedding priorities), the values of dimensions and
//     the keys of policies' values, the API keys' hashes and admin_hosts;
//   - fills what depends on other keys: a concurrency policy's slot_ttl
//     (DefaultSlotTTL), a lease's instances (store.fleet_size), the
//     anonymous IPv6 prefix (64), a measure's max (its reserve) and
//     reserve (its max), the fields a reserve_from.measure bound stands
//     for (usage.prompt_tokens, usage.completion_tokens), a route's
//     client_signals (server.client_signals);
//   - derives Server.TrustedPrefixes, the prices in nano-USD and each
//     measure's parsed settle expression;
//   - writes a route's cost block into Measures as the measure "cost", and
//     a route's upstreams into Upstream (the first) and Policies (every
//     candidate's, in order, each candidate's Policies a window of them);
//   - resolves each PolicyRef's Cost into Units or Measure.
func (c *Config) Normalize() {
	s := &c.Server
	s.TrustedPrefixes = nil
	for _, raw := range s.TrustedProxies {
		if p, err := parseTrusted(raw); err == nil {
			s.TrustedPrefixes = append(s.TrustedPrefixes, p)
		}
	}
	lowerEach(s.AdminHosts)

	id := &c.Identity
	for i := range id.APIKeys {
		k := &id.APIKeys[i]
		k.KeySHA256 = strings.ToLower(k.KeySHA256)
		k.Tier = strings.ToLower(k.Tier)
	}
	if a := id.Anonymous; a != nil {
		a.Tier = strings.ToLower(a.Tier)
		if a.IPv6Prefix == 0 {
			a.IPv6Prefix = 64
		}
	}

	for _, d := range c.Dimensions {
		lowerEach(d.Values)
	}
	for model, pr := range c.Prices {
		pr.InputNano, _ = parsePrice(pr.Input)
		pr.OutputNano, _ = parsePrice(pr.Output)
		pr.CachedNano = pr.InputNano
		if pr.Cached != "" {
			pr.CachedNano, _ = parsePrice(pr.Cached)
		}
		c.Prices[model] = pr
	}
	for name, pol := range c.Policies {
		c.normalizePolicy(name, &pol)
		c.Policies[name] = pol
	}
	for name, u := range c.Upstreams {
		u.Name = name
		if u.Shedding != nil {
			lowerEach(u.Shedding.Priority)
		}
		c.Upstreams[name] = u
	}
	for i := range c.Routes {
		c.normalizeRoute(&c.Routes[i])
	}
}

func (c *Config) normalizePolicy(name string, pol *Policy) {
	pol.Name = name
	lowerEach(pol.By)
	if pol.Values != nil {
		lowered := make(map[string]map[string]Limit, len(pol.Values))
		for v, limits := range pol.Values {
			lowered[strings.ToLower(v)] = limits
		}
		pol.Values = lowered
	}
	if pol.Algorithm == ratelimit.Concurrency && pol.SlotTTL == 0 {
		pol.SlotTTL = DefaultSlotTTL
	}
	if l := pol.Lease; l != nil && l.Instances == 0 && c.Store.FleetSize >= 1 {
		l.Instances = c.Store.FleetSize
	}
}

func (c *Config) normalizeRoute(r *Route) {
	if len(r.Upstreams) > 0 && !r.candidates {
		r.besideUpstream, r.besidePolicies = r.Upstream != "", len(r.Policies) > 0
		var all []PolicyRef
		for k := range r.Upstreams {
			cd := &r.Upstreams[k]
			cd.Upstream = strings.ToLower(cd.Upstream)
			all = append(all, cd.Policies...)
		}
		r.Policies, r.candidates = all, true
		r.Upstream = r.Upstreams[0].Upstream
	}
	r.Upstream = strings.ToLower(r.Upstream)
	for j := range r.Policies {
		r.Policies[j].Name = strings.ToLower(r.Policies[j].Name)
	}
	if b := r.Settle; b != nil {
		lowerEach(b.SettlePolicies)
		if len(r.Measures) == 0 || r.blockMeasure {
			r.Measures, r.blockMeasure = map[string]Measure{legacyMeasure: b.measure()}, true
		}
	}
	for name, m := range r.Measures {
		if !r.blockMeasure {
			asksJSON := m.ReserveFrom != nil && m.ReserveFrom.JSON != ""
			if m.Max == 0 && !asksJSON {
				m.Max = m.Reserve
			}
			if m.Reserve == 0 && m.ReserveFrom != nil {
				m.Reserve = m.Max
			}
		}
		if f := m.ReserveFrom; f != nil && f.Measure != "" {
			f.Measure = strings.ToLower(f.Measure)
			setZero(&f.Prompt, "usage.prompt_tokens")
			setZero(&f.Completion, "usage.completion_tokens")
		}
		m.expr = nil
		if m.Settle != "" {
			m.expr, _ = usage.ParseExpr(m.Settle)
		}
		r.Measures[name] = m
	}
	for j := range r.Policies {
		ref := &r.Policies[j]
		pol, ok := c.Policies[ref.Name]
		ref.Units, ref.Measure, ref.Unsettled, _ = r.costOf(*ref, pol, ok)
	}
	if r.ClientSignals == "" {
		r.ClientSignals = c.Server.ClientSignals
	}
	if r.candidates {
		rest := r.Policies
		for k := range r.Upstreams {
			n := len(r.Upstreams[k].Policies)
			r.Upstreams[k].Policies = rest[:n:n]
			rest = rest[n:]
		}
	}
}

// costOf resolves the cost of policy ref (pol, known when isKnown) on route
// r: left out, the route's cost (0 units) or its cost block's measure,
// which it keeps unsettled when the block's settle_policies leave it out;
// else a whole number of units or a measure of the route. problem is why
// the cost is none of those ("" when it is one), reported below the ref's
// path + ".cost".
func (r *Route) costOf(ref PolicyRef, pol Policy, isKnown bool) (units int64, measure string, unsettled bool, problem string) {
	conc := isKnown && pol.Algorithm == ratelimit.Concurrency
	cost := strings.TrimSpace(ref.Cost)
	if cost == "" {
		if b := r.Settle; b != nil && !conc {
			unsettled = len(b.SettlePolicies) > 0 && !slices.ContainsFunc(b.SettlePolicies, func(s string) bool {
				return strings.EqualFold(s, ref.Name)
			})
			return 0, legacyMeasure, unsettled, ""
		}
		return 0, "", false, ""
	}
	if n, err := strconv.ParseInt(cost, 10, 64); err == nil {
		if n < 1 {
			return 0, "", false, "must be >= 1, got " + strconv.FormatInt(n, 10)
		}
		return n, "", false, ""
	}
	name := strings.ToLower(cost)
	if _, ok := r.Measures[name]; !ok {
		return 0, "", false, strconv.Quote(cost) + " is neither a whole number of units nor a measure of this route" + known(r.Measures)
	}
	if conc {
		return 0, "", false, "policy " + strconv.Quote(ref.Name) + " limits concurrency: a request holds one slot, whatever its cost; list it by its name"
	}
	return 0, name, false, ""
}

// lowerEach lowercases every string of list in place.
func lowerEach(list []string) {
	for i, s := range list {
		list[i] = strings.ToLower(s)
	}
}
