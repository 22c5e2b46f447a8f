package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/time/rate"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/ratelimit"
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
	Name      string `json:"name"`
	Route     string `json:"route,omitempty"` // for the scopes tenant_route and route
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	Remaining int64  `json:"remaining"`
	ResetMS   int64  `json:"reset_ms"`
	WindowS   int64  `json:"window_s"`
	Debt      int64  `json:"debt"`
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
// held in a LocalSet of one key for its exact retry times and its clamp of
// a clock stepping back. It is carried over a reload that keeps its rate
// and burst, as stage 1's sets are.
type quotaBudget struct {
	set      *ratelimit.LocalSet
	maxItems int
}

// quotaBudgetKey is the budget's one key.
const quotaBudgetKey = ""

// newQuotaBudget returns the budget of p's configuration, prev's set when
// prev has the same rate and burst.
func newQuotaBudget(p, prev *pipeline) *quotaBudget {
	q := p.cfg.Server.Reads()
	lim, burst := rate.Limit(q.Rate), q.Burst
	b := &quotaBudget{maxItems: q.MaxItems}
	if prev != nil && prev.readBudget != nil {
		if l, bu := prev.readBudget.set.Limit(); l == lim && bu == burst {
			b.set = prev.readBudget.set
			return b
		}
	}
	b.set = ratelimit.NewLocalSet(ratelimit.LocalOptions{Rate: lim, Burst: burst, MaxLimiters: 1, Shards: 1})
	return b
}

// quotaEndpoint answers GET server.quota_path for the authenticated caller
// before routing: the state of the policies that limit the caller on any
// route, read from the store without consuming (each item costs 0, and a
// batch of 0-cost items writes nothing), through Stack.Read, so that a
// failed read is never a failed decision: it applies no on_store_error
// and never moves the breaker that decisions share; while that breaker is
// not closed, a read is 503 without a store call. It is never forwarded.
// A read spends, in this order and each only if the one before admitted
// it: the caller's own bound (quotaReadRate), one unit of stage 1 of the
// caller's tier (as a request of cost 1 would), and one read of the
// gateway-wide budget (server.quota_reads). A refusal is 429 with
// Retry-After and makes no store call; a read refused later keeps what it
// spent before, as a request that stage 2 denies keeps its stage-1 unit.
// One read carries at most server.quota_reads.max_items keys. Other
// methods on the path go on to routing.
//
// The budget of p is carried over from the live pipeline, which it
// replaces: quotaEndpoint is called while building p.
func (g *Gateway) quotaEndpoint(p *pipeline) func(http.Handler) http.Handler {
	path := p.cfg.Server.QuotaPath
	p.readBudget = newQuotaBudget(p, g.live.Load())
	budget := p.readBudget
	cooldown := time.Second
	if p.cfg.Store.Kind == config.StoreRedis && p.cfg.Store.Redis.BreakerCooldown > 0 {
		cooldown = p.cfg.Store.Redis.BreakerCooldown
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if path == "" || r.URL.Path != path || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
				next.ServeHTTP(w, r)
				return
			}
			st := stateFrom(r.Context())
			now := g.opts.Now()
			if ok, _, wait := p.quotaReads.Allow(st.caller.ID, now, 1); !ok {
				g.refuseRead(w, st, telemetry.ReadCaller, wait, "the quota endpoint is read too often by this caller")
				return
			}
			if set := p.tiers[st.caller.Tier]; set != nil {
				if ok, _, wait := set.Allow(st.caller.Subject, now, 1); !ok {
					g.refuseRead(w, st, telemetry.ReadTier, wait, "the caller's stage 1 limit is spent")
					return
				}
			}
			if ok, _, wait := budget.set.Allow(quotaBudgetKey, now, 1); !ok {
				g.refuseRead(w, st, telemetry.ReadBudget, wait, "the quota endpoint's read budget is spent; try again later")
				return
			}
			items, out, binds, truncated := p.quotaItems(st.caller.Subject, st.caller.Tier, budget.maxItems)
			reply := quotaReply{TenantHash: st.caller.ID, Tier: st.caller.Tier, Policies: []quotaPolicy{}, Truncated: truncated}
			if len(items) > 0 {
				d, err := p.store.Read(r.Context(), items)
				if err != nil {
					reason, retry := telemetry.ReadStoreError, time.Second
					if errors.Is(err, ratelimit.ErrBreakerOpen) {
						reason, retry = telemetry.ReadBreakerOpen, cooldown
					}
					g.opts.Metrics.QuotaReadRefused(reason)
					w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(retry), 10))
					writeProblem(w, problem{Status: http.StatusServiceUnavailable, Error: codeLimiterUnavailable,
						Message: "the limit store cannot be read", RequestID: st.requestID})
					return
				}
				now := g.opts.Now()
				for i, res := range d.Results {
					q := &out[i]
					q.Limit, q.Remaining, q.ResetMS, q.Debt = res.Limit, res.Remaining, ceilMillis(res.ResetAfter), res.Debt
					if cal := binds[i].limit.Calendar; cal.Set() {
						q.WindowS = calendarWindow(cal, res, now)
					}
				}
				reply.Policies = out
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

// refuseRead answers a read refused before any store call: 429
// rate_limited with Retry-After (whole seconds, at least 1) and
// retry_after_ms, counted by reason.
func (g *Gateway) refuseRead(w http.ResponseWriter, st *requestState, reason string, wait time.Duration, msg string) {
	g.opts.Metrics.QuotaReadRefused(reason)
	ms := ceilMillis(wait)
	w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(wait), 10))
	writeProblem(w, problem{Status: http.StatusTooManyRequests, Error: codeRateLimited,
		Message: msg, RequestID: st.requestID, RetryMS: &ms})
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
	for _, rt := range p.routes {
		ps := rt.policyFor(tier)
		for i := range ps {
			bp := &ps[i]
			key, err := bp.pattern.Key(id)
			if err != nil || seen[key] {
				continue
			}
			seen[key] = true
			e := entry{item: ratelimit.Item{Key: key, Algorithm: bp.algorithm, Limit: bp.limit, Shadow: true, OnError: bp.onError},
				q: quotaPolicy{Name: bp.name, Algorithm: bp.algorithm.String(), WindowS: bp.window}, bp: bp}
			if bp.scope == routes.ScopeTenantRoute || bp.scope == routes.ScopeRoute {
				e.q.Route = rt.name
				perRoute = append(perRoute, e)
			} else {
				shared = append(shared, e)
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
