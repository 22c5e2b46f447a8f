package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/telemetry"
)

// Admin returns the handler of the admin listener. Serve answers it only
// for the Host values checkAdminHost accepts (IP addresses, localhost, the
// names configured), and 421 for any other, on every endpoint.
//
// Open to every caller (probes and scrapers need them):
//
//	GET /healthz  200 while the process serves
//	GET /readyz   200 once a configuration is live and the gateway can
//	              serve: the store answers (and not every failure domain
//	              of its circuit breaker is open), or it does not but no
//	              enforced policy has on_store_error closed (then the body
//	              says "degraded"); 503 otherwise
//	GET /metrics  Prometheus text exposition (when metrics is not nil)
//	GET /         the admin console: a page (and its /console/console.js and
//	              /console/console.css) that shows /metrics, /console/state
//	              and /console/history live and looks tenants up through
//	              the endpoints below; it carries no data itself
//
// Protected (see protectAdmin: the admin token, or a loopback listener):
//
//	GET /config   the live configuration, redacted (no key hashes, no
//	              secrets, upstream URLs without user information or query)
//	GET /console/state  what the console shows besides the metrics:
//	              config version, policies, last reload, breaker, hot keys
//	GET /hotkeys  the store keys with the most decisions (estimated rate per
//	              second; keys carry hashed tenants, never names), to find
//	              the tenants whose policies would gain from a lease
//	GET /console/history  the console's time series: decisions, denials,
//	              fallbacks, store errors and store latency of the last
//	              minutes, sampled from the gateway's own metrics (see
//	              recordHistory)
//	POST /console/lookup  a tenant's quotas, by credential or name, as
//	              the quota endpoint shows them (see lookupHandler)
//	POST /console/grant, /console/reset  give a tenant's key of a policy
//	              units, or fill it: with a reason, logged and counted
//	              (see actionHandler); JSON bodies only
//	GET /debug/pprof/  Go profiles (CPU, heap, goroutines) of the process,
//	              and /debug/vars (expvar), only with server.pprof: true
//	              (404 otherwise)
func (g *Gateway) Admin(metrics http.Handler) http.Handler {
	r := chi.NewRouter()
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", g.readyz)
	if metrics != nil {
		r.Handle("/metrics", metrics)
	}
	page, assets := consoleAssets()
	r.Get("/", page.ServeHTTP)
	r.Get("/console/console.js", assets.ServeHTTP)
	r.Get("/console/console.css", assets.ServeHTTP)
	r.Group(func(r chi.Router) {
		r.Use(g.protectAdmin)
		r.Get("/console/state", g.consoleStateHandler)
		r.Get("/console/history", g.historyHandler)
		r.Post("/console/lookup", g.lookupHandler)
		r.Post("/console/grant", g.actionHandler(telemetry.ConsoleGrant))
		r.Post("/console/reset", g.actionHandler(telemetry.ConsoleReset))
		r.Get("/config", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, g.Config().Redacted())
		})
		r.Get("/hotkeys", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, map[string]any{"keys": g.hot.Top(20)})
		})
		profiler := middleware.Profiler()
		r.Mount("/debug", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if !g.admin.Load().pprof {
				http.NotFound(w, req)
				return
			}
			profiler.ServeHTTP(w, req)
		}))
	})
	return r
}

func (g *Gateway) readyz(w http.ResponseWriter, r *http.Request) {
	p := g.live.Load()
	if p == nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "no configuration"})
		return
	}
	body := map[string]any{"status": "ready"}
	if d := p.breakerDetail(); d != nil {
		body["upstreams"] = d
	}
	if down := storeDown(r.Context(), p.store); down != "" {
		// The gateway still serves every policy whose on_store_error is
		// open or local; only a closed one turns its requests into 503s.
		modes := p.storeErrorModes()
		body["store"] = down
		for _, mode := range []string{"open", "closed", "local"} {
			body["fail_"+mode] = modes[mode]
		}
		if len(modes["closed"]) > 0 {
			body["status"] = down
			writeJSON(w, http.StatusServiceUnavailable, body)
			return
		}
		body["status"] = "degraded"
	}
	writeJSON(w, http.StatusOK, body)
}

// readyPingTimeout bounds the PING of /readyz. It is well below the 1 s
// that a Kubernetes probe waits by default (timeoutSeconds): a probe that
// times out counts as a failure whatever the answer would have been, so a
// black-holed Redis would take out of its load balancer every instance,
// also those serving their open and local policies on a 200 "degraded".
const readyPingTimeout = 500 * time.Millisecond

// storeDown returns why store cannot decide now ("store circuit open",
// "store unreachable"), or "" when it answers a PING within
// readyPingTimeout.
func storeDown(ctx context.Context, store *stack.Stack) string {
	if store.Health().AllDown {
		return "store circuit open"
	}
	ctx, cancel := context.WithTimeout(ctx, readyPingTimeout)
	defer cancel()
	if err := store.Ping(ctx); err != nil {
		return "store unreachable"
	}
	return ""
}

// storeErrorModes returns the names of the policies that some route of p
// enforces (shadow policies deny nobody), sorted, by their on_store_error:
// "open", "closed", "local". Every mode has a list, empty when unused.
func (p *pipeline) storeErrorModes() map[string][]string {
	seen := map[string]bool{}
	modes := map[string][]string{"open": {}, "closed": {}, "local": {}}
	add := func(bps []boundPolicy) {
		for _, bp := range bps {
			if bp.shadow || seen[bp.name] {
				continue
			}
			seen[bp.name] = true
			modes[bp.onError.String()] = append(modes[bp.onError.String()], bp.name)
		}
	}
	for _, rt := range p.routes {
		rt.eachBinding(add)
	}
	for _, names := range modes {
		slices.Sort(names)
	}
	return modes
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
