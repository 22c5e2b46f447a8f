package config

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/usage"
)

// reservedPolicy names stage 1 in 429 bodies, so no policy may take it.
const reservedPolicy = "local"

func (c *Config) validateTiers(errs *Errors) {
	for name, t := range c.Tiers {
		p := join("tiers", name)
		if !nameRE.MatchString(name) {
			errs.add(p, "tier name "+nameRule)
		}
		if t.Local != nil {
			checkLimit(errs, p+".local", *t.Local, ratelimit.TokenBucket)
		}
	}
}

func (c *Config) validatePolicies(errs *Errors) {
	for name, pol := range c.Policies {
		p := join("policies", name)
		switch {
		case !nameRE.MatchString(name):
			errs.add(p, "policy name "+nameRule)
		case name == reservedPolicy:
			errs.add(p, `the policy name "local" is reserved for stage 1 (tiers.*.local)`)
		}
		if !pol.Scope.Valid() {
			errs.addf(p+".scope", "must be tenant, tenant_route, route or global, got %s", pol.Scope)
		}
		if !pol.OnStoreError.Valid() {
			errs.addf(p+".on_store_error", "must be open, closed or local, got %s", pol.OnStoreError)
		}
		alg := pol.Algorithm
		if !alg.Valid() {
			errs.addf(p+".algorithm", "must be token_bucket, fixed_window, sliding_window, sliding_log or concurrency, got %s", alg)
		}
		if len(pol.Limits) == 0 {
			errs.add(p+".limits", `must set a limit for at least one tier (or "*" for every tier)`)
		}
		c.validateLease(errs, p+".lease", pol, alg)
		validateSlots(errs, p, pol)
		c.validateBy(errs, p, pol)
		c.checkTierLimits(errs, p+".limits", pol, pol.Limits)
		for _, v := range slices.Sorted(maps.Keys(pol.Values)) {
			c.checkTierLimits(errs, join(p+".values", v), pol, pol.Values[v])
		}
	}
}

// checkTierLimits checks limits, a policy's limits by tier at path p.
func (c *Config) checkTierLimits(errs *Errors, p string, pol Policy, limits map[string]Limit) {
	alg := pol.Algorithm
	for tier, l := range limits {
		lp := join(p, tier)
		if _, ok := c.Tiers[tier]; !ok && tier != "*" {
			errs.addf(lp, `unknown tier %q%s; "*" means every tier`, tier, known(c.Tiers))
		}
		if alg == ratelimit.Concurrency {
			if l.Per != 0 {
				errs.add(lp+".per", "does not apply to concurrency (slot_ttl is how long a slot lives); remove it")
			}
			// The store keeps a slot for Per without a renewal (see
			// Policy.StoreLimit).
			l.Per = pol.SlotTTL
			if slotTTLProblem(l.Per) != "" {
				l.Per = minSlotTTL // slot_ttl is reported; check the rest
			}
		}
		if alg.Valid() {
			checkLimit(errs, lp, l, alg)
		}
	}
}

// validateBy checks policy pol's by (p is its path) against the
// dimensions, and its values.
func (c *Config) validateBy(errs *Errors, p string, pol Policy) {
	if len(pol.By) > 1 {
		errs.addf(p+".by", "names %d dimensions; a policy is keyed by at most one", len(pol.By))
	}
	var dim Dimension
	for j, name := range pol.By {
		d, ok := c.Dimensions[name]
		if !ok {
			errs.addf(index(p+".by", j), "unknown dimension %q%s", name, known(c.Dimensions))
		}
		if j == 0 {
			dim = d
		}
	}
	if len(pol.Values) > 0 && len(pol.By) == 0 {
		errs.add(p+".values", "needs by: values are limits of single values of the dimension the policy is keyed by")
		return
	}
	for v := range pol.Values {
		if len(dim.Values) > 0 && !slices.Contains(dim.Values, v) {
			errs.addf(join(p+".values", v), "is not a value of dimension %s (%s)", pol.By[0], strings.Join(dim.Values, ", "))
		}
	}
}

// dimensionNameRE is the form of a dimension's name, and dimValueRE of
// its values.
var (
	dimensionNameRE = regexp.MustCompile(`^[a-z0-9_]{1,32}$`)
	dimValueRE      = regexp.MustCompile(`^[A-Za-z0-9._/@+-]{1,64}$`)
)

// maxPriceUSD bounds a price, in USD per million tokens.
const maxPriceUSD = 1_000_000

// parsePrice parses a price as a price list writes it, USD per million
// tokens ("2.50", "0.075"), into nano-USD per token, exactly.
func parsePrice(s string) (int64, error) {
	whole, frac, dotted := strings.Cut(s, ".")
	if whole == "" || dotted && frac == "" || strings.Trim(whole+frac, "0123456789") != "" {
		return 0, fmt.Errorf("must be a decimal number of USD per million tokens, such as \"2.50\", got %q", s)
	}
	if len(frac) > 3 {
		return 0, fmt.Errorf("%q has more than 3 decimals: prices are held in nano-USD per token (0.001 USD per million tokens)", s)
	}
	if len(whole) > 7 {
		return 0, fmt.Errorf("%q is above %d USD per million tokens", s, maxPriceUSD)
	}
	w, _ := strconv.ParseInt(whole, 10, 64)
	f, _ := strconv.ParseInt((frac + "000")[:3], 10, 64)
	if w > maxPriceUSD || w == maxPriceUSD && f > 0 {
		return 0, fmt.Errorf("%q is above %d USD per million tokens", s, maxPriceUSD)
	}
	return w*1000 + f, nil
}

// validatePrices checks that every price parses; cached may be left out
// (Normalize makes it input's).
func (c *Config) validatePrices(errs *Errors) {
	for model, pr := range c.Prices {
		p := join("prices", model)
		check := func(key, v string) {
			if v == "" {
				errs.add(p+"."+key, "is required")
			} else if _, err := parsePrice(v); err != nil {
				errs.add(p+"."+key, err.Error())
			}
		}
		check("input", pr.Input)
		check("output", pr.Output)
		if pr.Cached != "" {
			check("cached", pr.Cached)
		}
	}
}

// validateDimensions checks every dimension's name, source and values.
func (c *Config) validateDimensions(errs *Errors) {
	for name, d := range c.Dimensions {
		p := join("dimensions", name)
		if !dimensionNameRE.MatchString(name) {
			errs.add(p, "a dimension's name must be 1 to 32 of [a-z0-9_]")
		}
		switch {
		case (d.JSON == "") == (d.Header == ""):
			errs.add(p, "must name exactly one of json and header")
		default:
			sourceErr(errs, p+".json", usage.RequestSource{JSON: d.JSON}.Validate(), "json")
			sourceErr(errs, p+".header", usage.RequestSource{Header: d.Header}.Validate(), "header")
		}
		if len(d.Values) == 0 || len(d.Values) > MaxDimensionValues {
			errs.addf(p+".values", "must list 1 to %d values, got %d", MaxDimensionValues, len(d.Values))
		}
		seen := map[string]bool{}
		for j, v := range d.Values {
			switch {
			case !dimValueRE.MatchString(v):
				errs.addf(index(p+".values", j), "%q: a value is 1 to 64 of [A-Za-z0-9._/@+-]", v)
			case seen[v]:
				errs.addf(index(p+".values", j), "%q is listed twice (values are compared case-insensitively)", v)
			}
			seen[v] = true
		}
	}
}

// minSlotTTL is the shortest slot_ttl: slots are renewed every third of
// it, by one store call per instance.
const minSlotTTL = time.Second

// validateSlots checks the concurrency fields of policy pol (at path).
func validateSlots(errs *Errors, path string, pol Policy) {
	if pol.Algorithm != ratelimit.Concurrency {
		if pol.SlotTTL != 0 {
			errs.addf(path+".slot_ttl", "applies to concurrency policies only, not %s; remove it", pol.Algorithm)
		}
		if pol.Queue != nil {
			errs.addf(path+".queue", "applies to concurrency policies only, not %s; remove it", pol.Algorithm)
		}
		return
	}
	if problem := slotTTLProblem(pol.SlotTTL); problem != "" {
		errs.add(path+".slot_ttl", problem)
	}
	if q := pol.Queue; q != nil {
		if q.Max < 1 {
			errs.add(path+".queue.max", "must be >= 1 (leave queue out for no queue)")
		}
		if q.Timeout <= 0 {
			errs.add(path+".queue.timeout", "must be > 0")
		}
	}
}

// slotTTLProblem says what is wrong with a concurrency policy's slot_ttl
// ttl, or "".
func slotTTLProblem(ttl time.Duration) string {
	switch {
	case ttl < minSlotTTL:
		return fmt.Sprintf("must be at least %s, got %s", minSlotTTL, ttl)
	case ttl%time.Millisecond != 0:
		return fmt.Sprintf("must be a whole number of milliseconds, got %s", ttl)
	}
	return ""
}

// validateLease checks a policy's lease.
func (c *Config) validateLease(errs *Errors, path string, pol Policy, alg ratelimit.Algorithm) {
	l := pol.Lease
	if l == nil {
		return
	}
	if alg.Valid() && alg != ratelimit.TokenBucket {
		errs.addf(path, "applies to token_bucket policies only, not %s; remove it", alg)
	}
	if pol.Shadow {
		errs.add(path, "a shadow policy is never leased; remove it")
	}
	switch {
	case l.Auto && l.MaxBlock < 0:
		errs.add(path+".max_block", "must be >= 0 (0 or absent: no bound but burst/(2 × instances))")
	case !l.Auto && l.MaxBlock < 1:
		errs.add(path+".max_block", "must be >= 1")
	}
	if l.TTL <= 0 {
		errs.add(path+".ttl", "must be > 0")
	}
	if l.Instances < 0 {
		errs.add(path+".instances", "must be >= 1 (leave it out for store.fleet_size)")
	}
}

// checkLimit reports below path the rules of ratelimit.Limit.Validate
// that l breaks under algorithm alg, which must be valid.
func checkLimit(errs *Errors, path string, l Limit, alg ratelimit.Algorithm) {
	var les ratelimit.LimitErrors
	if errors.As(ratelimit.Limit(l).Validate(alg), &les) {
		for _, e := range les {
			errs.add(path+"."+e.Field, e.Problem)
		}
	}
}

// effectiveLimits returns, for policy pol, the keys of pol.Limits that apply
// to at least one defined tier: a tier's own entry, else "*".
func (c *Config) effectiveLimits(pol Policy) []string {
	used := make(map[string]bool)
	for tier := range c.Tiers {
		if _, ok := pol.Limits[tier]; ok {
			used[tier] = true
		} else if _, ok := pol.Limits["*"]; ok {
			used["*"] = true
		}
	}
	keys := make([]string, 0, len(used))
	for k := range used {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// checkCost reports a route cost that a limit of policy pol or a tier's
// stage 1 could never admit.
func (c *Config) checkCost(errs *Errors, path string, cost int64, pol Policy) {
	if pol.Lease != nil && pol.Lease.MaxBlock >= 1 && cost > pol.Lease.MaxBlock {
		errs.addf(path, "%d exceeds lease.max_block %d of policy %q: a block could never hold such a request", cost, pol.Lease.MaxBlock, pol.Name)
	}
	alg := pol.Algorithm
	if !alg.Valid() || alg == ratelimit.Concurrency { // a request holds one slot, whatever its cost
		return
	}
	for _, tier := range c.effectiveLimits(pol) {
		capa := ratelimit.Capacity(alg, ratelimit.Limit(pol.Limits[tier]))
		if capa > 0 && cost > capa {
			who := fmt.Sprintf("tier %q", tier)
			if tier == "*" {
				who = `"*"`
			}
			errs.addf(path, "%d exceeds the capacity %d of policy %q for %s: such a request could never be admitted", cost, capa, pol.Name, who)
		}
	}
	for _, v := range slices.Sorted(maps.Keys(pol.Values)) {
		for _, tier := range slices.Sorted(maps.Keys(pol.Values[v])) {
			capa := ratelimit.Capacity(alg, ratelimit.Limit(pol.Values[v][tier]))
			if capa > 0 && cost > capa {
				errs.addf(path, "%d exceeds the capacity %d of policy %q for value %s of tier %q: such a request could never be admitted", cost, capa, pol.Name, v, tier)
			}
		}
	}
}
