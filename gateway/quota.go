package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"

	"golang.org/x/time/rate"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/routes"
)

// quotaReply is the body of GET server.quota_path. Its field names are part
// of the users' contract (README, "The quota endpoint").
type quotaReply struct {
	TenantHash string        `json:"tenant_hash"`
	Tier       string        `json:"tier"`
	Policies   []quotaPolicy `json:"policies"`
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
// quotaReadRate times a second, on this instance. Each read is one store
// call, so without this bound the endpoint would be a way to make unlimited
// store calls that no policy counts. Reads over it get 429 without a store
// call.
const (
	quotaReadRate  rate.Limit = 2
	quotaReadBurst int        = 10
)

// quotaEndpoint answers GET server.quota_path for the authenticated caller
// before routing: the state of every policy that limits the caller on any
// route, read from the store without consuming (each item costs 0, and a
// batch of 0-cost items writes nothing). It is never rate limited and never
// forwarded. Reads are bounded per caller (see quotaReadRate). Other
// methods on the path go on to routing.
func (g *Gateway) quotaEndpoint(p *pipeline) func(http.Handler) http.Handler {
	path := p.cfg.Server.QuotaPath
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if path == "" || r.URL.Path != path || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
				next.ServeHTTP(w, r)
				return
			}
			st := stateFrom(r.Context())
			if ok, _, wait := p.quotaReads.Allow(st.caller.ID, g.opts.Now(), 1); !ok {
				w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(wait), 10))
				writeProblem(w, problem{Status: http.StatusTooManyRequests, Error: codeRateLimited,
					Message: "the quota endpoint is read too often by this caller", RequestID: st.requestID})
				return
			}
			subject := p.subjectID(st.caller.Subject)
			var items []ratelimit.Item
			var out []quotaPolicy
			var binds []*boundPolicy
			seen := make(map[string]bool)
			for _, rt := range p.routes {
				ps := rt.policyFor(st.caller.Tier)
				for i := range ps {
					bp := &ps[i]
					key, err := bp.pattern.Key(subject)
					if err != nil || seen[key] {
						continue
					}
					seen[key] = true
					items = append(items, ratelimit.Item{Key: key, Algorithm: bp.algorithm, Limit: bp.limit, Shadow: true, OnError: bp.onError})
					q := quotaPolicy{Name: bp.name, Algorithm: bp.algorithm.String(), WindowS: bp.window}
					if bp.scope == routes.ScopeTenantRoute || bp.scope == routes.ScopeRoute {
						q.Route = rt.name
					}
					out = append(out, q)
					binds = append(binds, bp)
				}
			}
			reply := quotaReply{TenantHash: st.caller.ID, Tier: st.caller.Tier, Policies: []quotaPolicy{}}
			if len(items) > 0 {
				d, err := p.store.Decide(r.Context(), items)
				if err != nil || d.Failure != nil {
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
