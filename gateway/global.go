package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/routes"
)

// globalStage is stage 2: every policy of the route that limits the caller's
// tier is decided in one store call, all-or-nothing within the tenant's slot
// (see ratelimit.Store for policies of the route and global scopes, which
// live in other slots and are decided first). Shadow policies are evaluated
// and counted but never deny. When the store cannot decide, each policy
// applies its on_store_error mode.
func (g *Gateway) globalStage(p *pipeline) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			st := stateFrom(r.Context())
			ps := st.policies
			if len(ps) == 0 {
				setRateLimitHeaders(w.Header(), st.limit)
				next.ServeHTTP(w, r)
				return
			}
			items := make([]ratelimit.Item, len(ps))
			subject := routes.NewSubjectID(st.caller.Subject) // hashed once per request
			for i := range ps {
				bp := &ps[i]
				key, err := bp.pattern.Key(subject)
				if err != nil { // an empty subject: refuse rather than share one bucket
					writeProblem(w, problem{Status: http.StatusUnauthorized, Error: codeUnauthenticated,
						Message: "caller has no identity", RequestID: st.requestID})
					return
				}
				items[i] = ratelimit.Item{Key: key, Algorithm: bp.algorithm, Limit: bp.limit, Cost: st.route.cost, Shadow: bp.shadow, Lease: bp.lease}
			}

			// The last item is the tenant's slot (shared scopes come first).
			g.hot.Observe(items[len(items)-1].Key)
			ctx, span := g.startStage(r.Context(), "quotagate.stage.global")
			if span.IsRecording() {
				span.SetAttributes(
					attribute.String("quotagate.stage", "global"),
					attribute.String("quotagate.route", st.route.name),
					attribute.String("quotagate.caller", st.caller.ID))
			}
			start := time.Now()
			d, err := p.backend.Store.Decide(ctx, items)
			elapsed := time.Since(start)
			if m := g.opts.Metrics; m != nil {
				m.DecisionDuration(ctx, "global", elapsed)
				m.StoreCall(ctx, "decide", elapsed)
			}
			if err != nil {
				allowed := g.storeFailed(ctx, w, span, st, p, items, err)
				span.End()
				if allowed {
					setRateLimitHeaders(w.Header(), st.limit)
					next.ServeHTTP(w, r)
				}
				return
			}
			allowed, view, violated := g.record(ctx, span, ps, d, "global")
			span.End()
			st.limit = view
			if !allowed {
				g.deny(w, st, view, violated)
				return
			}
			setRateLimitHeaders(w.Header(), view)
			next.ServeHTTP(w, r)
		})
	}
}

// record counts a decision per policy, annotates the span, and returns what
// the response should say: the policy that decided and the violated ones.
// In a denied decision only the denying policies are counted (as denied);
// the others neither consumed nor decided.
func (g *Gateway) record(ctx context.Context, span trace.Span, ps []boundPolicy, d ratelimit.Decision, stage string) (bool, rateLimitView, []string) {
	var view rateLimitView
	var violated []string
	decided := -1
	for i, res := range d.Results {
		bp := &ps[i]
		switch {
		case !res.Allowed && bp.shadow:
			g.count(ctx, bp.name, stage, "shadow_denied")
			span.AddEvent("shadow_denied", trace.WithAttributes(attribute.String("quotagate.policy", bp.name)))
		case !res.Allowed:
			violated = append(violated, bp.name)
			g.count(ctx, bp.name, stage, "denied")
			if decided < 0 || res.RetryAfter > d.Results[decided].RetryAfter {
				decided = i
			}
		case d.Allowed && !bp.shadow:
			g.count(ctx, bp.name, stage, "allowed")
			if decided < 0 || res.Remaining < d.Results[decided].Remaining {
				decided = i
			}
		case d.Allowed:
			g.count(ctx, bp.name, stage, "allowed")
		}
	}
	recording := span.IsRecording()
	if recording {
		result := "allowed"
		if !d.Allowed {
			result = "denied"
		}
		span.SetAttributes(attribute.String("quotagate.decision", result))
	}
	if decided >= 0 {
		res, bp := d.Results[decided], &ps[decided]
		view = rateLimitView{policy: bp.name, quota: bp.quota, window: bp.window, remaining: res.Remaining, retry: res.RetryAfter, reset: res.ResetAfter}
		if !res.Allowed {
			view.reset = res.RetryAfter
		}
		if recording {
			span.SetAttributes(attribute.String("quotagate.policy", bp.name), attribute.Int64("quotagate.remaining", res.Remaining),
				attribute.Int64("quotagate.retry_after_ms", ceilMillis(res.RetryAfter)))
		}
	}
	return d.Allowed, view, violated
}

func (g *Gateway) count(ctx context.Context, policy, stage, result string) {
	if m := g.opts.Metrics; m != nil {
		m.Decision(ctx, policy, stage, result)
	}
}

// storeFailed applies each policy's on_store_error mode after the store
// could not decide, writing the response itself unless the request may go
// on (true). closed answers 503 (it wins over the others), local decides the
// policy on this instance's share of its limit, open allows. Every fallback
// is counted; the warning log is itself rate-limited.
func (g *Gateway) storeFailed(ctx context.Context, w http.ResponseWriter, span trace.Span, st *requestState, p *pipeline, items []ratelimit.Item, err error) bool {
	kind := ratelimit.FailureKind(err)
	span.RecordError(err)
	span.SetStatus(codes.Error, "store "+kind)
	m := g.opts.Metrics
	if m != nil {
		m.StoreError(ctx, kind)
	}
	if ok, suppressed := g.logLimit.Allow(kind); ok { // kind is one of four constants
		g.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "store failed; applying on_store_error",
			slog.String("kind", kind), slog.String("error", err.Error()), slog.Int("suppressed", suppressed))
	}

	ps := st.policies
	closedBy := ""
	var local []ratelimit.Item
	var localPs []boundPolicy
	for i := range ps {
		bp := &ps[i]
		mode := bp.onError
		if m != nil {
			m.StoreFallback(ctx, bp.name, mode.String())
		}
		g.count(ctx, bp.name, "global", "error")
		span.AddEvent("store_fallback", trace.WithAttributes(attribute.String("quotagate.policy", bp.name), attribute.String("mode", mode.String())))
		switch mode {
		case ratelimit.OnErrorClosed:
			if !bp.shadow && closedBy == "" {
				closedBy = bp.name
			}
		case ratelimit.OnErrorLocal:
			it := items[i]
			it.Key = "fallback:" + it.Key
			it.Limit = bp.share
			it.Lease = ratelimit.Lease{}
			local = append(local, it)
			lp := *bp // advertise the share that is enforced, not the fleet's quota
			lp.quota, lp.window = advertised(bp.share, bp.algorithm)
			localPs = append(localPs, lp)
		}
	}
	if closedBy != "" {
		retry := p.backend.RetryAfter
		if retry <= 0 {
			retry = time.Second
		}
		span.SetAttributes(attribute.String("quotagate.decision", "unavailable"), attribute.String("quotagate.policy", closedBy))
		g.unavailable(w, st, closedBy, retry)
		return false
	}
	if len(local) == 0 {
		span.SetAttributes(attribute.String("quotagate.decision", "fail_open"))
		return true
	}
	d, lerr := g.fallback.Decide(ctx, local)
	if lerr != nil { // the in-process store only fails on invalid items
		span.SetAttributes(attribute.String("quotagate.decision", "fail_open"))
		return true
	}
	allowed, view, violated := g.record(ctx, span, localPs, d, "fallback")
	st.limit = view
	if !allowed {
		g.deny(w, st, view, violated)
		return false
	}
	return true
}
