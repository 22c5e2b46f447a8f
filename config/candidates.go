package config

import (
	"github.com/quotagate/quotagate/ratelimit"
)

// checkUpstream reports at path an upstream name that is empty or not one
// of upstreams.
func (c *Config) checkUpstream(errs *Errors, path, name string) {
	if _, ok := c.Upstreams[name]; !ok {
		if name == "" {
			errs.add(path, "is required")
		} else {
			errs.addf(path, "unknown upstream %q%s", name, known(c.Upstreams))
		}
	}
}

// validateCandidates checks the upstreams a route lists, at path p; their
// policies, which Normalize wrote into the route's Policies, are checked
// by validateRoutePolicies.
func (c *Config) validateCandidates(errs *Errors, p string, r *Route) {
	if r.besideUpstream {
		errs.add(p+".upstream", "cannot be written beside upstreams: the route forwards to one of its upstreams")
	}
	if r.besidePolicies {
		errs.add(p+".policies", "cannot be written beside upstreams: list the policies of each upstream under it")
	}
	if len(r.Upstreams) > MaxCandidates {
		errs.addf(p+".upstreams", "lists %d upstreams, at most %d", len(r.Upstreams), MaxCandidates)
	}
	seen := make(map[string]int, len(r.Upstreams))
	last := len(r.Upstreams) - 1
	for k := range r.Upstreams {
		cd, cp := r.Upstreams[k], index(p+".upstreams", k)
		c.checkUpstream(errs, cp+".upstream", cd.Upstream)
		if j, dup := seen[cd.Upstream]; dup && cd.Upstream != "" {
			errs.addf(cp+".upstream", "upstream %q is listed twice (%s)", cd.Upstream, index(p+".upstreams", j))
		}
		seen[cd.Upstream] = k
		if k < last && len(cd.Policies) == 0 {
			errs.add(cp+".policies", "is required but on the last upstream: without policies it admits every request, and the upstreams after it are never used")
		}
		for j, ref := range cd.Policies {
			pol, ok := c.Policies[ref.Name]
			if ok && k < last && pol.Algorithm == ratelimit.Concurrency && pol.Queue != nil {
				errs.addf(index(cp+".policies", j), "policy %q queues denied requests, which only the last upstream may: a request this upstream denies goes to the next", pol.Name)
			}
		}
	}
}

// policyPath returns the path of r.Policies[j] in the configuration the
// user wrote (p is the route's), and whether it is the first policy of
// one of the route's candidates.
func (r *Route) policyPath(p string, j int) (string, bool) {
	if !r.candidates {
		return index(p+".policies", j), false
	}
	for k, cd := range r.Upstreams {
		if j < len(cd.Policies) {
			return index(index(p+".upstreams", k)+".policies", j), j == 0
		}
		j -= len(cd.Policies)
	}
	return index(p+".policies", j), false // not reached: Policies are the candidates'
}
