package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/time/rate"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/identity"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/local"
	"github.com/quotagate/quotagate/routes"
	"github.com/quotagate/quotagate/telemetry"
)

// quotaReply is the body of GET server.quota_path. Its field names are part
// of the users' contract (docs/reference/http-api.md#the-quota-endpoint).
type quotaReply struct {
	TenantHash string        `json:"tenant_hash"`
	Tier       string        `json:"tier"`
	Policies   []quotaPolicy `json:"policies"`
	// Truncated reports that the caller is limited by more store keys
	// than one read reads (server.quota_reads.max_items): Policies holds
	// the first max_items of them.
	Truncated bool `json:"truncated"`
}

// quotaPolicy is one store key that limits the caller.
type quotaPolicy struct {
	Name  string `json:"name"`
	Route string `json:"route,omitempty"` // for the scopes tenant_route and route
	// By is the dimension value of a policy keyed by a dimension, such
	// as "model=gpt-4o" ("model=*": every other value); empty otherwise.
	By string `json:"by,omitempty"`
	// Upstream is the upstream, of a route that lists several, whose
	// policy this is (the first that lists it); empty otherwise.
	Upstream  string `json:"upstream,omitempty"`
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	Remaining int64  `json:"remaining"`
	ResetMS   int64  `json:"reset_ms"`
	WindowS   int64  `json:"window_s"`
	Debt      int64  `json:"debt"`
	// Regions is the regional and the global view of a policy shared
	// across regions (regions: {mode: leased}); nil for any other. The
	// fields above are then those of this region's bucket, decided on
	// the region's grant.
	Regions *quotaRegions `json:"regions,omitempty"`
}

// Each caller (by its hashed identity, so every anonymous IP is its own
// caller) may read the quota endpoint quotaReadBurst times at once and then
// quotaReadRate times a second, on this instance. Reads over it get 429
// without a store call. It does not bound what callers that are each new
// cost together: the gateway-wide budget (server.quota_reads, see
// quotaBudget) does.
const (
	quotaReadRate  rate.Limit = 2
	quotaReadBurst int        = 10
)

// quotaBudget is the gateway-wide budget of quota endpoint reads
// (server.quota_reads: rate and burst): one token bucket for every caller,
// held in a local.Set of one key for its exact retry times and its clamp of
// a clock stepping back. It is carried over a reload that keeps its rate
// and burst, as stage 1's sets are. The admin console's tenant lookups
// spend it too (see readQuota).
type quotaBudget struct {
	set      *local.Set
	maxItems int
	// cooldown is the Retry-After of a read refused while the store's
	// breaker is not closed: its cooldown (1 s without one).
	cooldown time.Duration
}

// quotaBudgetKey is the budget's one key.
const quotaBudgetKey = ""

// newQuotaBudget returns the budget of p's configuration, prev's set when
// prev has the same rate and burst.
func newQuotaBudget(p, prev *pipeline) *quotaBudget {
	q := p.cfg.Server.Reads()
	lim, burst := rate.Limit(q.Rate), q.Burst
	b := &quotaBudget{maxItems: q.MaxItems, cooldown: time.Second}
	if p.cfg.Store.Kind == config.StoreRedis && p.cfg.Store.Redis.BreakerCooldown > 0 {
		b.cooldown = p.cfg.Store.Redis.BreakerCooldown
	}
	if prev != nil && prev.readBudget != nil {
		if l, bu := prev.readBudget.set.Limit(); l == lim && bu == burst {
			b.set = prev.readBudget.set
			return b
		}
	}
	b.set = local.New(local.Options{Rate: lim, Burst: burst, MaxLimiters: 1, Shards: 1})
	return b
}

// quotaEndpoint answers GET server.quota_path for the authenticated caller
// before routing: the state of the policies that limit the caller on any
// route (see readQuota). It is never forwarded. A read spends, in this
// order and each only if the one before admitted it: the caller's own
// bound (quotaReadRate), one unit of stage 1 of the caller's tier (as a
// request of cost 1 would), and what readQuota spends. A refusal is 429
// with Retry-After and makes no store call; a read refused later keeps
// what it spent before, as a request that stage 2 denies keeps its
// stage-1 unit. Other methods on the path go on to routing.
//
// The budget of p is carried over from the live pipeline, which it
// replaces: quotaEndpoint is called while building p.
func (g *Gateway) quotaEndpoint(p *pipeline) func(http.Handler) http.Handler {
	path := p.cfg.Server.QuotaPath
	p.readBudget = newQuotaBudget(p, g.live.Load())
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if path == "" || r.URL.Path != path || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
				next.ServeHTTP(w, r)
				return
			}
			st := stateFrom(r.Context())
			now := g.opts.Now()
			if ok, _, wait := p.quotaReads.Allow(st.caller.ID, now, 1); !ok {
				g.refuseRead(w, st.requestID, &readRefusal{http.StatusTooManyRequests, telemetry.ReadCaller, wait,
					"the quota endpoint is read too often by this caller"})
				return
			}
			if set := p.tiers[st.caller.Tier]; set != nil {
				if ok, _, wait := set.Allow(st.caller.Subject, now, 1); !ok {
					g.refuseRead(w, st.requestID, &readRefusal{http.StatusTooManyRequests, telemetry.ReadTier, wait,
						"the caller's stage 1 limit is spent"})
					return
				}
			}
			reply, refused := g.readQuota(r.Context(), p, st.caller)
			if refused != nil {
				g.refuseRead(w, st.requestID, refused)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			if r.Method == http.MethodHead {
				return
			}
			_ = json.NewEncoder(w).Encode(reply)
		})
	}
}

// readRefusal is why a quota read got no state from the store: the
// status of its answer (429 over a budget, without a store call; 503 when
// the store cannot be read), the reason it is counted under in
// quotagate_quota_reads_refused_total, the time to retry after, and the
// message.
type readRefusal struct {
	status int
	reason string
	wait   time.Duration
	msg    string
}

// readQuota reads what limits caller under p: the state of the store keys
// of the policies that limit it on any route (at most
// server.quota_reads.max_items of them, see quotaItems), read without
// consuming (each item costs 0, and a batch of 0-cost items writes
// nothing) through Stack.Read, so that a failed read is never a failed
// decision: it applies no on_store_error and never moves the breaker that
// decisions share; while that breaker is not closed, a read is refused
// without a store call. It first spends one read of the gateway-wide
// budget (server.quota_reads), refusing without a store call when it is
// spent. It is the one reader of quotas: the quota endpoint calls it for
// the caller of a request, the admin console for the caller an operator
// looks up.
func (g *Gateway) readQuota(ctx context.Context, p *pipeline, caller identity.Caller) (quotaReply, *readRefusal) {
	budget := p.readBudget
	if ok, _, wait := budget.set.Allow(quotaBudgetKey, g.opts.Now(), 1); !ok {
		return quotaReply{}, &readRefusal{http.StatusTooManyRequests, telemetry.ReadBudget, wait,
			"the quota endpoint's read budget is spent; try again later"}
	}
	items, out, binds, truncated := p.quotaItems(caller.Subject, caller.Tier, budget.maxItems)
	reply := quotaReply{TenantHash: caller.ID, Tier: caller.Tier, Policies: []quotaPolicy{}, Truncated: truncated}
	if len(items) == 0 {
		return reply, nil
	}
	items, regions := p.regionViews(items, binds, out)
	var d ratelimit.Decision
	var err error
	if len(items) > 0 {
		d, err = p.store.Read(ctx, items)
	}
	if err != nil {
		ref := &readRefusal{http.StatusServiceUnavailable, telemetry.ReadStoreError, time.Second, "the limit store cannot be read"}
		if errors.Is(err, ratelimit.ErrBreakerOpen) {
			ref.reason, ref.wait = telemetry.ReadBreakerOpen, budget.cooldown
		}
		return quotaReply{}, ref
	}
	now := g.opts.Now()
	for j, res := range d.Results {
		i := regions.index(j)
		q := &out[i]
		q.Limit, q.Remaining, q.ResetMS, q.Debt = res.Limit, res.Remaining, ceilMillis(res.ResetAfter), res.Debt
		if cal := binds[i].limit.Calendar; cal.Set() {
			q.WindowS = calendarWindow(cal, res, now)
		}
	}
	g.readGlobal(ctx, p, regions, out)
	reply.Policies = out
	return reply, nil
}

// refuseRead answers a refused read, counted by its reason: 429
// rate_limited with Retry-After (whole seconds, at least 1) and
// retry_after_ms, or 503 limiter_unavailable with Retry-After.
func (g *Gateway) refuseRead(w http.ResponseWriter, requestID string, ref *readRefusal) {
	g.opts.Metrics.QuotaReadRefused(ref.reason)
	w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(ref.wait), 10))
	if ref.status == http.StatusServiceUnavailable {
		writeProblem(w, problem{Status: ref.status, Error: codeLimiterUnavailable, Message: ref.msg, RequestID: requestID})
		return
	}
	ms := ceilMillis(ref.wait)
	writeProblem(w, problem{Status: ref.status, Error: codeRateLimited, Message: ref.msg, RequestID: requestID, RetryMS: &ms})
}

// quotaItems returns the read items of the store keys that limit the
// caller (subject, tier) on any route, each key once, with the reply
// entries and bound policies they belong to: first the keys of scopes
// tenant and global, then those of tenant_route and route, in route
// order. It returns at most maxItems of them, and whether there were
// more.
func (p *pipeline) quotaItems(subject, tier string, maxItems int) (items []ratelimit.Item, out []quotaPolicy, binds []*boundPolicy, truncated bool) {
	id := p.subjectID(subject)
	type entry struct {
		item ratelimit.Item
		q    quotaPolicy
		bp   *boundPolicy
	}
	var shared, perRoute []entry
	seen := make(map[string]bool)
	for _, route := range p.routes {
		for rt := route; rt != nil; rt = rt.fallback { // each of its upstreams'
			for v := range rt.anyTier { // every value of its dimension, then the shared bucket
				ps := rt.policyFor(tier, v)
				for i := range ps {
					bp := &ps[i]
					key, err := bp.pattern.Key(id)
					if err != nil || seen[key] {
						continue
					}
					seen[key] = true
					e := entry{item: ratelimit.Item{Key: key, Algorithm: bp.algorithm, Limit: bp.limit, Shadow: true, OnError: bp.onError},
						q: quotaPolicy{Name: bp.name, By: bp.by, Upstream: rt.upstreamName, Algorithm: bp.algorithm.String(), WindowS: bp.window}, bp: bp}
					if bp.scope == routes.ScopeTenantRoute || bp.scope == routes.ScopeRoute {
						e.q.Route = rt.name
						perRoute = append(perRoute, e)
					} else {
						shared = append(shared, e)
					}
				}
			}
		}
	}
	all := append(shared, perRoute...)
	if len(all) > maxItems {
		all, truncated = all[:maxItems], true
	}
	for _, e := range all {
		items = append(items, e.item)
		out = append(out, e.q)
		binds = append(binds, e.bp)
	}
	return items, out, binds, truncated
}
