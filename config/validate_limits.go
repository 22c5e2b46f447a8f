package config

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
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
		pol.Name = name
		c.Policies[name] = pol
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
		c.validateSlots(errs, p, &pol)
		c.Policies[name] = pol
		for tier, l := range pol.Limits {
			lp := join(p+".limits", tier)
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
				if l.Per <= 0 {
					l.Per = minSlotTTL // slot_ttl is reported; check the rest
				}
			}
			if alg.Valid() {
				checkLimit(errs, lp, l, alg)
			}
		}
	}
}

// minSlotTTL is the shortest slot_ttl: slots are renewed every third of
// it, by one store call per instance.
const minSlotTTL = time.Second

// validateSlots checks the concurrency fields of policy pol (at path) and
// fills in the default slot_ttl.
func (c *Config) validateSlots(errs *Errors, path string, pol *Policy) {
	if pol.Algorithm != ratelimit.Concurrency {
		if pol.SlotTTL != 0 {
			errs.addf(path+".slot_ttl", "applies to concurrency policies only, not %s; remove it", pol.Algorithm)
		}
		if pol.Queue != nil {
			errs.addf(path+".queue", "applies to concurrency policies only, not %s; remove it", pol.Algorithm)
		}
		return
	}
	switch {
	case pol.SlotTTL == 0:
		pol.SlotTTL = 30 * time.Second
	case pol.SlotTTL < minSlotTTL:
		errs.addf(path+".slot_ttl", "must be at least %s, got %s", minSlotTTL, pol.SlotTTL)
		pol.SlotTTL = 0
	case pol.SlotTTL%time.Millisecond != 0:
		errs.addf(path+".slot_ttl", "must be a whole number of milliseconds, got %s", pol.SlotTTL)
		pol.SlotTTL = 0
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

// validateLease checks a policy's lease and fills in its instances.
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
	switch {
	case l.Instances < 0:
		errs.add(path+".instances", "must be >= 1 (leave it out for store.fleet_size)")
	case l.Instances == 0 && c.Store.FleetSize >= 1:
		l.Instances = c.Store.FleetSize
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
}
