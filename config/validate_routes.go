package config

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

func (c *Config) validateUpstreams(errs *Errors) {
	for name, u := range c.Upstreams {
		p := join("upstreams", name)
		if !nameRE.MatchString(name) {
			errs.add(p, "upstream name "+nameRule)
		}
		if err := checkUpstreamURL(u.URL); err != nil {
			errs.add(p+".url", err.Error())
		}
		positive(errs, p+".timeout", u.Timeout)
		if b := u.Breaker; b != nil {
			if b.Failures < 1 {
				errs.addf(p+".breaker.failures", "must be at least 1, got %d", b.Failures)
			}
			positive(errs, p+".breaker.cooldown", b.Cooldown)
		}
		if s := u.Shedding; s != nil {
			c.validateShedding(errs, p+".shedding", s)
		}
	}
}

// validateShedding checks s.
func (c *Config) validateShedding(errs *Errors, p string, s *Shedding) {
	if s.TargetLatency == 0 {
		errs.add(p+".target_latency", "is required: the latency the upstream should keep to, such as 250ms")
	} else {
		positive(errs, p+".target_latency", s.TargetLatency)
	}
	if s.MinInflight < 1 {
		errs.addf(p+".min_inflight", "must be at least 1, got %d", s.MinInflight)
	}
	if s.MaxInflight < s.MinInflight {
		errs.addf(p+".max_inflight", "must be at least min_inflight %d, got %d", s.MinInflight, s.MaxInflight)
	}
	seen := map[string]bool{}
	for i, t := range s.Priority {
		switch {
		case seen[t]:
			errs.addf(fmt.Sprintf("%s.priority[%d]", p, i), "tier %q is listed twice", t)
		case !c.hasTier(t):
			errs.addf(fmt.Sprintf("%s.priority[%d]", p, i), "unknown tier %q%s", t, known(c.Tiers))
		}
		seen[t] = true
	}
}

func (c *Config) hasTier(name string) bool {
	_, ok := c.Tiers[name]
	return ok
}

// checkUpstreamURL accepts EchoURL or an absolute http(s) URL with a host
// and without a fragment or user information (the proxy refuses
// credentials in a URL, so validate must too).
func checkUpstreamURL(raw string) error {
	const want = `must be an absolute http or https URL such as http://127.0.0.1:9001, or "echo:"`
	if raw == EchoURL {
		return nil
	}
	if raw == "" {
		return errors.New("is required: " + want[len("must be "):])
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return fmt.Errorf("%s, got %q", want, redactURL(raw))
	}
	if u.Fragment != "" {
		return fmt.Errorf("must not have a #fragment, got %q", redactURL(raw))
	}
	if u.Port() != "" {
		if _, err := hostPort(u.Host, false); err != nil {
			return fmt.Errorf("has a bad port, got %q", redactURL(raw))
		}
	}
	if u.User != nil {
		return fmt.Errorf("must not carry credentials (user:password@), got %q", redactURL(raw))
	}
	return nil
}

// redactURL hides the password of a URL's user information.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	return u.Redacted()
}

var (
	// methodRE is an uppercase HTTP token (RFC 9110 tchar without a-z).
	methodRE = regexp.MustCompile("^[A-Z0-9!#$%&'*+.^_`|~-]+$")
	// paramRE is the name inside {name} or {name...}.
	paramRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,31}$`)
	// literalRE is a literal segment: RFC 3986 pchar without
	// percent-encodings (requests are matched decoded) and without '*',
	// which is easy to mistake for a wildcard.
	literalRE = regexp.MustCompile(`^[A-Za-z0-9._~!$&'()+,;=:@-]+$`)
)

// maxPathLen and maxSegments bound a route path template, as the route
// table does.
const (
	maxPathLen  = 2048
	maxSegments = 32
)

func (c *Config) validateRoutes(errs *Errors) {
	if len(c.Routes) == 0 {
		errs.add("routes", "must list at least one route (without any, every request is answered 404)")
	}
	names := make(map[string]int, len(c.Routes))
	shapes := make(map[string]int, len(c.Routes))
	for i := range c.Routes {
		r := &c.Routes[i]
		p := index("routes", i)
		switch j, dup := names[r.Name]; {
		case !nameRE.MatchString(r.Name):
			errs.add(p+".name", "route name "+nameRule)
		case dup:
			errs.addf(p+".name", "duplicate of routes[%d].name %q", j, r.Name)
		default:
			names[r.Name] = i
		}
		methodOK := methodRE.MatchString(r.Method)
		if !methodOK {
			errs.addf(p+".method", "must be an uppercase HTTP method such as GET or POST, got %q", r.Method)
		}
		shape, err := pathShape(r.Path)
		if err != nil {
			errs.add(p+".path", err.Error())
		} else if j, dup := shapes[r.Method+" "+shape]; dup && methodOK {
			errs.addf(p+".path", "matches the same requests as routes[%d], which comes first: this route can never match", j)
		} else {
			shapes[r.Method+" "+shape] = i
		}
		if r.candidates {
			c.validateCandidates(errs, p, r)
		} else {
			c.checkUpstream(errs, p+".upstream", r.Upstream)
		}
		c.validateRoutePolicies(errs, p, r)
		if err := r.ClientSignals.check(); err != nil && r.ClientSignals != c.Server.ClientSignals { // else reported at server.client_signals
			errs.add(p+".client_signals", err.Error())
		}
	}
}

// validateRoutePolicies checks a route's policy references, the cost each
// takes and the route's measures against every limit that could apply.
func (c *Config) validateRoutePolicies(errs *Errors, p string, r *Route) {
	if r.Cost < 1 && r.Settle == nil { // a block reports its reserve
		errs.add(p+".cost", "must be >= 1")
	}
	c.validateCostBlock(errs, p, r)
	seen := make(map[string]bool, len(r.Policies))
	for j := range r.Policies {
		pp, first := r.policyPath(p, j)
		if first { // a policy may be listed by several candidates
			clear(seen)
		}
		ref := r.Policies[j]
		name := ref.Name
		pol, ok := c.Policies[name]
		switch {
		case name == "":
			errs.add(pp+".name", "is required")
		case name == reservedPolicy:
			errs.add(pp, `"local" is stage 1, which applies to every route through tiers; remove it`)
		case !ok:
			errs.addf(pp, "unknown policy %q%s", name, known(c.Policies))
		case seen[name]:
			errs.addf(pp, "policy %q is listed twice", name)
		}
		seen[name] = true
		if _, _, _, problem := r.costOf(ref, pol, ok); problem != "" {
			errs.add(pp+".cost", problem)
		}
		switch {
		case !ok || ref.Measure != "":
		case ref.Units >= 1:
			c.checkCost(errs, pp+".cost", ref.Units, pol)
		case r.Cost >= 1 && ref.Cost == "":
			c.checkCost(errs, p+".cost", r.Cost, pol)
		}
	}
	c.validateMeasures(errs, p, r)
	var dim, by string
	for _, ref := range r.Policies {
		pol, ok := c.Policies[ref.Name]
		if !ok || len(pol.By) == 0 {
			continue
		}
		if dim == "" {
			dim, by = pol.By[0], "policy "+ref.Name
		} else if pol.By[0] != dim {
			errs.addf(p+".policies", "%s is by dimension %s, policy %s by %s: the policies of a route are keyed by at most one dimension",
				by, dim, ref.Name, pol.By[0])
			break
		}
	}
	for _, d := range r.SettleDimensions() {
		if dim == "" {
			dim, by = d, "price("+d+")"
		} else if d != dim {
			errs.addf(p+".measures", "%s is by dimension %s, price(%s) by %s: a route reads at most one dimension", by, dim, d, d)
		}
	}
	if m, ok := r.Measures[legacyMeasure]; ok && r.Settle != nil && m.Max > m.Reserve {
		c.checkLocalCost(errs, p+".cost.max", m.Max) // stage 1 takes the block's reservation
	}
	if r.Cost < 1 {
		return
	}
	c.checkLocalCost(errs, p+".cost", r.Cost)
}

// checkLocalCost reports a cost that a tier's stage 1 could never admit.
func (c *Config) checkLocalCost(errs *Errors, path string, cost int64) {
	for _, tier := range sortedTierNames(c.Tiers) {
		if l := c.Tiers[tier].Local; l != nil && l.Burst > 0 && cost > l.Burst {
			errs.addf(path, "%d exceeds the stage 1 burst %d of tier %q: its callers could never be admitted", cost, l.Burst, tier)
		}
	}
}

func sortedTierNames(m map[string]Tier) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// pathShape checks a route path template and returns its shape: the
// template with parameter names removed, so that two templates matching the
// same requests have the same shape.
//
// A template is "/" or starts with "/" and has up to 32 segments between
// slashes, none empty (so no trailing slash). Each is literal text, "{name}"
// (exactly one segment) or, as the last segment only, "{name...}" (one or
// more remaining segments). Parameter names are unique within a template.
func pathShape(path string) (string, error) {
	if !strings.HasPrefix(path, "/") {
		return "", fmt.Errorf("must start with \"/\", got %q", path)
	}
	if len(path) > maxPathLen {
		return "", fmt.Errorf("must be at most %d bytes", maxPathLen)
	}
	if path == "/" {
		return path, nil
	}
	segs := strings.Split(path[1:], "/")
	if len(segs) > maxSegments {
		return "", fmt.Errorf("must have at most %d segments", maxSegments)
	}
	shape := make([]string, len(segs))
	params := make(map[string]bool)
	for i, seg := range segs {
		last := i == len(segs)-1
		switch {
		case seg == "" && last:
			return "", fmt.Errorf("must not end in \"/\" (only the root \"/\" does), got %q", path)
		case seg == "":
			return "", fmt.Errorf("has an empty segment (\"//\") in %q", path)
		case strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}"):
			name, rest := strings.CutSuffix(seg[1:len(seg)-1], "...")
			if rest && !last {
				return "", fmt.Errorf("segment %q: {%s...} must be the last segment", seg, name)
			}
			if !paramRE.MatchString(name) {
				return "", fmt.Errorf("segment %q: a parameter name must be a letter or '_' followed by up to 31 letters, digits or '_'", seg)
			}
			if params[name] {
				return "", fmt.Errorf("parameter {%s} appears twice", name)
			}
			params[name] = true
			shape[i] = "{}"
			if rest {
				shape[i] = "{...}"
			}
			continue
		case strings.ContainsAny(seg, "{}"):
			return "", fmt.Errorf("segment %q: a parameter must be a whole segment, like {id}", seg)
		case seg == "." || seg == "..":
			return "", fmt.Errorf("segment %q can never match a cleaned request path", seg)
		case strings.Contains(seg, "*"):
			return "", fmt.Errorf("segment %q: '*' is not a wildcard here; use a last segment {name...} to match the rest", seg)
		case !literalRE.MatchString(seg):
			return "", fmt.Errorf("segment %q has a character not allowed in a URL path", seg)
		case strings.Contains(seg, ";"):
			return "", fmt.Errorf("segment %q: ';' starts a path parameter, which requests are matched without", seg)
		case strings.HasSuffix(seg, "."):
			return "", fmt.Errorf("segment %q: must not end in '.' (requests are matched without trailing dots)", seg)
		}
		shape[i] = strings.ToLower(seg) // literals match in any case
	}
	return "/" + strings.Join(shape, "/"), nil
}
