package config

import (
	"net/url"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

// Redacted returns c as a tree of maps, lists, strings, numbers and booleans
// for the admin /config endpoint (encoding/json renders it with sorted keys).
// Keys are the configuration's keys; durations are strings such as "250ms".
//
// It shows no secret: API keys appear as their tenant and tier only (no
// hash, not even a part of it), passwords, JWT secrets and the admin token
// only by the name of the environment variable holding them, TLS files by
// path only, and an upstream URL without its user information and query
// (see showURL). It is built field by field, so a field added to
// Config stays hidden until it is added here.
func (c *Config) Redacted() map[string]any {
	keys := make([]any, len(c.Identity.APIKeys))
	for i, k := range c.Identity.APIKeys {
		keys[i] = map[string]any{"tenant": k.Tenant, "tier": k.Tier}
	}
	identity := map[string]any{"api_keys": keys}
	if j := c.Identity.JWT; j != nil {
		identity["jwt"] = map[string]any{
			"secret_env":                  j.SecretEnv,
			"tenant_claim":                j.TenantClaim,
			"tier_claim":                  j.TierClaim,
			"share_tenants_with_api_keys": j.ShareTenantsWithAPIKeys,
			"issuers":                     copyList(j.Issuers),
			"audiences":                   copyList(j.Audiences),
			"clock_skew":                  dur(j.ClockSkew),
		}
	}
	if a := c.Identity.Anonymous; a != nil {
		identity["anonymous"] = map[string]any{"tier": a.Tier, "ipv6_prefix": a.IPv6Prefix}
	}

	tiers := make(map[string]any, len(c.Tiers))
	for name, t := range c.Tiers {
		tier := map[string]any{}
		if t.Local != nil {
			tier["local"] = redactLimit(*t.Local)
		}
		tiers[name] = tier
	}
	policies := make(map[string]any, len(c.Policies))
	for name, p := range c.Policies {
		limits := make(map[string]any, len(p.Limits))
		for tier, l := range p.Limits {
			if p.Algorithm == ratelimit.Concurrency {
				limits[tier] = map[string]any{"max": l.Max} // a concurrency limit has no rate or period
				continue
			}
			limits[tier] = redactLimit(l)
		}
		pol := map[string]any{
			"scope":          p.Scope.String(),
			"algorithm":      p.Algorithm.String(),
			"on_store_error": p.OnStoreError.String(),
			"shadow":         p.Shadow,
			"limits":         limits,
		}
		if p.Algorithm == ratelimit.Concurrency {
			pol["slot_ttl"] = dur(p.SlotTTL)
			if q := p.Queue; q != nil {
				pol["queue"] = map[string]any{"max": q.Max, "timeout": dur(q.Timeout)}
			}
		}
		if l := p.Lease; l != nil {
			pol["lease"] = map[string]any{"auto": l.Auto, "max_block": l.MaxBlock, "ttl": dur(l.TTL), "instances": l.Instances}
		}
		policies[name] = pol
	}
	upstreams := make(map[string]any, len(c.Upstreams))
	for name, u := range c.Upstreams {
		upstreams[name] = map[string]any{"url": showURL(u.URL), "timeout": dur(u.Timeout)}
	}
	routes := make([]any, len(c.Routes))
	for i, r := range c.Routes {
		routes[i] = map[string]any{
			"name":           r.Name,
			"method":         r.Method,
			"path":           r.Path,
			"upstream":       r.Upstream,
			"cost":           showCost(r),
			"policies":       showPolicies(r),
			"measures":       showMeasures(r),
			"client_signals": r.ClientSignals,
		}
		if len(r.Upstreams) > 0 { // as written: instead of upstream and policies
			cands := make([]any, len(r.Upstreams))
			for k, cd := range r.Upstreams {
				cands[k] = map[string]any{"upstream": cd.Upstream, "policies": showPolicies(Route{Policies: cd.Policies})}
			}
			m := routes[i].(map[string]any)
			delete(m, "upstream")
			delete(m, "policies")
			m["upstreams"] = cands
		}
	}

	s, st, rd := c.Server, c.Store, c.Store.Redis
	return map[string]any{
		"server": map[string]any{
			"listen":              s.Listen,
			"admin_listen":        s.AdminListen,
			"admin_token_env":     s.AdminTokenEnv,
			"admin_hosts":         copyList(s.AdminHosts),
			"pprof":               s.Pprof,
			"read_header_timeout": dur(s.ReadHeaderTimeout),
			"idle_timeout":        dur(s.IdleTimeout),
			"max_header_bytes":    s.MaxHeaderBytes,
			"max_body_bytes":      s.MaxBodyBytes,
			"body_read_timeout":   dur(s.BodyReadTimeout),
			"body_min_rate":       derefOrNil(s.BodyMinRate),
			"body_buffer_bytes":   s.BodyBufferBytes,
			"quota_reads":         quotaReads(s.Reads()),
			"quota_path":          s.QuotaPath,
			"shutdown_timeout":    dur(s.ShutdownTimeout),
			"trusted_proxies":     copyList(s.TrustedProxies),
			"max_local_callers":   s.MaxLocalCallers,
			"upstream_exchanges":  s.UpstreamExchanges,
			"client_signals":      s.ClientSignals,
			"heap_floor_bytes":    derefOrNil(s.HeapFloorBytes),
		},
		"store": map[string]any{
			"kind":       st.Kind,
			"fleet_size": st.FleetSize,
			"fleet":      map[string]any{"ttl": dur(st.Fleet.TTL), "static": st.Fleet.Static},
			"redis": map[string]any{
				"addrs":            copyList(rd.Addrs),
				"master_name":      rd.MasterName,
				"username":         rd.Username,
				"password_env":     rd.PasswordEnv,
				"timeout":          dur(rd.Timeout),
				"pool_size":        rd.PoolSize,
				"key_prefix":       rd.KeyPrefix,
				"breaker_failures": rd.BreakerFailures,
				"breaker_cooldown": dur(rd.BreakerCooldown),
				"tls":              rd.TLS.redacted(),
			},
		},
		"identity":  identity,
		"log":       map[string]any{"level": c.Log.Level},
		"tiers":     tiers,
		"policies":  policies,
		"upstreams": upstreams,
		"routes":    routes,
		"rls":       c.RLS.redacted(),
	}
}

// redacted shows the TLS settings of the store: whether it is on, and the
// files by path only (never what they hold). The server's certificate is
// always verified (there is no setting to skip that), against ca_file or,
// when it is empty, the system's roots.
func (t RedisTLS) redacted() map[string]any {
	return map[string]any{
		"enabled":     t.Enabled,
		"ca_file":     t.CAFile,
		"cert_file":   t.CertFile,
		"key_file":    t.KeyFile,
		"server_name": t.ServerName,
	}
}

// redacted shows the decision service's settings; TLS files by path only,
// the client token by its variable's name.
func (r RLS) redacted() map[string]any {
	m := map[string]any{
		"listen":           r.Listen,
		"http_listen":      r.HTTPListen,
		"config_files":     copyList(r.ConfigFiles),
		"on_store_error":   r.OnStoreError,
		"response_headers": r.ResponseHeaders,
		"limit_overrides":  r.LimitOverrides,
		"shutdown_delay":   dur(r.ShutdownDelay),
	}
	if r.TLS != nil {
		m["tls"] = map[string]any{"cert_file": r.TLS.CertFile, "key_file": r.TLS.KeyFile}
	}
	if a := r.ClientAuth; a != nil { // the token's variable by name only
		m["client_auth"] = map[string]any{"token_env": a.TokenEnv, "client_ca_file": a.ClientCAFile, "none": a.None}
	}
	return m
}

func redactLimit(l Limit) map[string]any {
	m := map[string]any{"rate": l.Rate, "per": dur(l.Per)}
	if l.Calendar.Set() {
		delete(m, "per")
		m["calendar"] = map[string]any{"unit": l.Calendar.Unit.String(), "time_zone": l.Calendar.Zone.String()}
	}
	if l.Burst != 0 {
		m["burst"] = l.Burst
	}
	if l.Buckets != 0 {
		m["buckets"] = l.Buckets
	}
	return m
}

func dur(d time.Duration) string { return d.String() }

func quotaReads(q QuotaReads) map[string]any {
	return map[string]any{"rate": q.Rate, "burst": q.Burst, "max_items": q.MaxItems}
}

// copyList copies a list so that the tree shares nothing with c, and renders
// an empty one as [] rather than null.
func copyList(list []string) []string {
	return append([]string{}, list...)
}

// showURL returns raw fit to show: user information (name and password)
// becomes "redacted", and so does a query, which often carries an API key;
// a fragment is dropped. A URL that does not parse is not shown at all.
func showURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL, not shown)"
	}
	if u.User != nil {
		u.User = url.User("redacted")
	}
	if u.RawQuery != "" || u.ForceQuery {
		u.RawQuery, u.ForceQuery = "redacted", false
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// showCost is a route's cost as written: a number, or its block.
func showCost(r Route) any {
	b := r.Settle
	if b == nil {
		return r.Cost
	}
	m := showMeasure(b.measure())
	if len(b.SettlePolicies) > 0 {
		m["settle_policies"] = copyList(b.SettlePolicies)
	}
	return m
}

// showMeasure is a measure (or the measure of a cost block) as written.
func showMeasure(ms Measure) map[string]any {
	m := map[string]any{"reserve": ms.Reserve, "max": ms.Max, "max_body": ms.MaxBody}
	if f := ms.ReserveFrom; f != nil {
		rf := map[string]any{"json": f.JSON, "header": f.Header}
		if len(f.JSONAliases) > 0 {
			rf["json_aliases"] = copyList(f.JSONAliases)
		}
		if f.JSONCount != "" {
			rf["json_count"] = f.JSONCount
		}
		if f.Measure != "" {
			rf["measure"], rf["prompt"], rf["completion"] = f.Measure, f.Prompt, f.Completion
		}
		m["reserve_from"] = rf
	}
	if f := ms.SettleFrom; f != nil {
		m["settle_from"] = map[string]any{"header": f.Header, "json": f.JSON, "sse": f.SSE}
	}
	if ms.OnMissingUsage != MissingUsageKeep {
		m["on_missing_usage"] = ms.OnMissingUsage
	}
	return m
}

// showMeasures is a route's measures as written; nil for none, and for a
// cost block (shown as its cost).
func showMeasures(r Route) any {
	if r.Settle != nil || len(r.Measures) == 0 {
		return nil
	}
	out := make(map[string]any, len(r.Measures))
	for name, m := range r.Measures {
		out[name] = showMeasure(m)
	}
	return out
}

// showPolicies is a route's policies as written: a name, or {name, cost}
// for one with a cost of its own.
func showPolicies(r Route) []any {
	out := make([]any, len(r.Policies))
	for i, ref := range r.Policies {
		out[i] = ref.Name
		if ref.Cost != "" {
			out[i] = map[string]any{"name": ref.Name, "cost": ref.Cost}
		}
	}
	return out
}

// derefOrNil is *p, or nil when p is nil.
func derefOrNil[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
