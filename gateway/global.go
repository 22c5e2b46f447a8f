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
	"github.com/quotagate/quotagate/telemetry"
)

// globalStage is stage 2: every policy of the route that limits the caller's
// tier is decided in one store call, all-or-nothing within the tenant's slot
// (see ratelimit.Store for policies of the route and global scopes, which
// live in other slots and are decided first). Shadow policies are evaluated
// and counted but never deny. When the store cannot decide, each policy
// applies its on_store_error mode in the store's Fallback layer, and this
// stage records what it decided. It reads: build items, Decide, record,
// respond.
//
// Concurrency policies take a slot in the same decision; the request holds
// it until the rest of the pipeline has returned (the response streamed to
// its end, the client gone, or a WebSocket closed), and a denied request
// may wait for a slot in the policy's queue first (see Gateway.decide).
func (g *Gateway) globalStage(p *pipeline) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			st := stateFrom(r.Context())
			ps := st.policies
			if len(ps) == 0 {
				setRateLimitHeaders(w.Header(), st.limit, &st.hdr.rateLimit)
				if openAISignals(st) {
					collectLocalSignals(st, st.limit)
					setSignalHeaders(w.Header(), &st.signals)
				}
				next.ServeHTTP(w, r)
				return
			}
			var (
				items    []ratelimit.Item
				holder   string
				d        ratelimit.Decision
				span     trace.Span
				allowed  bool
				view     rateLimitView
				violated []string
				denied   *candidateDenial
			)
			for {
				var ok bool
				if items, holder, ok = g.stageItems(p, st, ps); !ok { // an empty subject: refuse rather than share one bucket
					writeProblem(w, problem{Status: http.StatusUnauthorized, Error: codeUnauthenticated,
						Message: "caller has no identity", RequestID: st.requestID})
					return
				}
				// The last item is the tenant's slot (shared scopes come first).
				g.hot.Observe(items[len(items)-1].Key)
				var ctx context.Context
				ctx, span = g.startStage(r.Context(), "quotagate.stage.global")
				if span.IsRecording() {
					span.SetAttributes(
						telemetry.AttrStage.String("global"),
						telemetry.AttrRoute.String(st.route.name),
						telemetry.AttrCaller.String(st.caller.ID))
					if st.route.upstreamName != "" {
						span.SetAttributes(telemetry.AttrUpstream.String(st.route.upstreamName))
					}
				}
				var queued queueResult
				var err error
				d, queued, err = g.decide(ctx, p, ps, items)
				if queued.policy != "" {
					if m := g.opts.Metrics; m != nil {
						m.QueueWait(ctx, queued.policy, queued.waited)
					}
					if reqSpan := trace.SpanFromContext(r.Context()); reqSpan.IsRecording() {
						reqSpan.SetAttributes(telemetry.AttrQueuePolicy.String(queued.policy),
							telemetry.AttrQueueWaitMS.Int64(ceilMillis(queued.waited)))
					}
					if queued.gone { // nobody to answer
						span.End()
						st.rec.status = 499
						return
					}
				}
				if err != nil {
					// Only items without a valid on_store_error fail, and the
					// compile step binds none: refuse rather than guess.
					span.RecordError(err)
					span.End()
					g.unavailable(w, st, ps[0].name, time.Second)
					return
				}
				if d.Failure != nil {
					g.storeFailed(ctx, span, ps, d.Failure)
					if d.Unavailable {
						closedBy := closedPolicy(ps, d)
						span.SetAttributes(telemetry.AttrDecision.String("unavailable"), telemetry.AttrPolicy.String(closedBy))
						span.End()
						g.unavailable(w, st, closedBy, d.RetryAfter)
						return
					}
					if !decidedLocally(d) {
						span.SetAttributes(telemetry.AttrDecision.String("fail_open"))
						span.End()
						setRateLimitHeaders(w.Header(), st.limit, &st.hdr.rateLimit)
						next.ServeHTTP(w, r)
						return
					}
				}
				allowed, view, violated = g.record(ctx, span, ps, d)
				if !allowed && plantAdmit(g.opts.Now()) { // false but in the chaos suite's planted build
					allowed = true
				}
				span.End()
				if allowed || st.route.fallback == nil {
					break
				}
				// Denied, and nothing taken (a decision is all or
				// nothing): the next candidate decides the request.
				if denied == nil || view.retry < denied.view.retry {
					denied = &candidateDenial{route: st.route, ps: ps, d: d, view: view, violated: violated}
				}
				st.route = st.route.fallback
				if ps = st.route.policyFor(st.caller.Tier, st.value); len(ps) == 0 {
					break // this candidate does not limit the caller's tier
				}
			}
			if len(ps) == 0 { // admitted by a candidate without policies for the tier
				setRateLimitHeaders(w.Header(), st.limit, &st.hdr.rateLimit)
				next.ServeHTTP(w, r)
				return
			}
			if !allowed && denied != nil && denied.view.retry < view.retry { // every candidate denied: the soonest
				st.route, ps, d, view, violated = denied.route, denied.ps, denied.d, denied.view, denied.violated
			}
			st.policies = ps
			st.limit = view
			openAI := openAISignals(st)
			if openAI {
				collectSignals(st, ps, d)
			}
			if !allowed {
				g.deny(w, st, view, violated)
				return
			}
			setRateLimitHeaders(w.Header(), view, &st.hdr.rateLimit)
			if openAI {
				setSignalHeaders(w.Header(), &st.signals)
			}
			if g.reserveForSettle(r.Context(), p, st, ps, items, d) {
				// Deferred too: a reservation left unsettled by an aborted
				// response is counted missing.
				defer g.endSettle(r.Context(), st)
			}
			if holder != "" { // a concurrency policy: it may have taken a slot
				if held := g.slots.hold(p.store, p.inlineRelease, ps, items, d, g.opts.Now()); held != nil {
					// Deferred: the proxy aborts a response the client left
					// mid-stream by panicking with http.ErrAbortHandler.
					defer held.release(trace.SpanFromContext(r.Context()), g.opts.Now)
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

// candidateDenial is how one candidate of a route that lists upstreams
// denied a request, kept to answer with when every candidate denies.
type candidateDenial struct {
	route    *route
	ps       []boundPolicy
	d        ratelimit.Decision
	view     rateLimitView
	violated []string
}

// stageItems returns the store items of policies ps for the request of
// st and the holder of its concurrency slots ("" without one); false
// when the caller has no identity.
func (g *Gateway) stageItems(p *pipeline, st *requestState, ps []boundPolicy) ([]ratelimit.Item, string, bool) {
	items := make([]ratelimit.Item, len(ps))
	subject := p.subjectID(st.caller.Subject) // once per request
	holder := ""
	for i := range ps {
		bp := &ps[i]
		key, err := bp.pattern.Key(subject)
		if err != nil {
			return nil, "", false
		}
		items[i] = ratelimit.Item{Key: key, Algorithm: bp.algorithm, Limit: bp.limit, Cost: bp.cost(&st.reserved), Shadow: bp.shadow,
			OnError: bp.onError, Lease: bp.lease, Region: bp.region}
		if bp.algorithm == ratelimit.Concurrency { // one slot, whatever the cost
			if holder == "" {
				holder = g.slots.holder()
			}
			items[i].Holder = holder
		}
	}
	return items, holder, true
}

// record counts a decision per policy, annotates the span, and returns what
// the response should say: the policy that decided and the violated ones.
// In a denied decision only the denying policies are counted (as denied);
// the others neither consumed nor decided. A decision the store could not
// make (d.Failure) is recorded for the policies decided on their local
// share only, as the "fallback" stage, advertising the share.
func (g *Gateway) record(ctx context.Context, span trace.Span, ps []boundPolicy, d ratelimit.Decision) (bool, rateLimitView, []string) {
	stage := "global"
	if d.Failure != nil {
		stage = "fallback"
	}
	var view rateLimitView
	var violated []string
	decided := -1
	for i, res := range d.Results {
		bp := &ps[i]
		if d.Failure != nil && res.Fallback != ratelimit.OnErrorLocal {
			continue
		}
		series := &bp.series
		if d.Failure != nil {
			series = nil // the fallback stage: rare, looked up by name
		}
		switch {
		case !res.Allowed && bp.shadow:
			g.countIn(ctx, series, bp.name, stage, telemetry.ResultShadowDenied)
			span.AddEvent("shadow_denied", trace.WithAttributes(telemetry.AttrPolicy.String(bp.name)))
		case !res.Allowed:
			violated = append(violated, bp.name)
			g.countIn(ctx, series, bp.name, stage, telemetry.ResultDenied)
			if decided < 0 || res.RetryAfter > d.Results[decided].RetryAfter {
				decided = i
			}
		case d.Allowed && !bp.shadow:
			g.countIn(ctx, series, bp.name, stage, telemetry.ResultAllowed)
			if decided < 0 || res.Remaining < d.Results[decided].Remaining {
				decided = i
			}
		case d.Allowed:
			g.countIn(ctx, series, bp.name, stage, telemetry.ResultAllowed)
		}
	}
	recording := span.IsRecording()
	if recording {
		result := "allowed"
		if !d.Allowed {
			result = "denied"
		}
		span.SetAttributes(telemetry.AttrDecision.String(result))
	}
	if decided >= 0 {
		res, bp := d.Results[decided], &ps[decided]
		view = rateLimitView{policy: bp.name, quota: bp.quota, window: bp.window, remaining: res.Remaining, retry: res.RetryAfter, reset: res.ResetAfter}
		if res.Fallback == ratelimit.OnErrorLocal { // advertise the share that is enforced
			view.quota, view.window = g.shareView(bp)
		}
		if cal := bp.limit.Calendar; cal.Set() {
			view.window = calendarWindow(cal, res, g.opts.Now())
		}
		if !res.Allowed {
			view.reset = res.RetryAfter
		}
		if recording {
			span.SetAttributes(telemetry.AttrPolicy.String(bp.name), telemetry.AttrRemaining.Int64(res.Remaining),
				telemetry.AttrRetryAfterMS.Int64(ceilMillis(res.RetryAfter)))
		}
	}
	return d.Allowed, view, violated
}

// countIn counts a decision of policy in its prebuilt series when s is
// not nil (the global stage), and by its label values otherwise. result is
// one of the telemetry.Result constants the series are built for.
func (g *Gateway) countIn(ctx context.Context, s *policySeries, policy, stage, result string) {
	m := g.opts.Metrics
	if m == nil {
		return
	}
	if s == nil {
		m.Decision(ctx, policy, stage, result)
		return
	}
	switch result {
	case telemetry.ResultAllowed:
		m.CountDecision(s.allowed)
	case telemetry.ResultDenied:
		m.CountDecision(s.denied)
	default:
		m.CountDecision(s.shadowDenied)
	}
}

func (g *Gateway) count(ctx context.Context, policy, stage, result string) {
	if m := g.opts.Metrics; m != nil {
		m.Decision(ctx, policy, stage, result)
	}
}

// storeFailed records that the store could not decide (err) and that every
// policy fell back to its on_store_error mode: the error's kind, one count
// per policy and mode, and a warning log, itself rate-limited.
func (g *Gateway) storeFailed(ctx context.Context, span trace.Span, ps []boundPolicy, err error) {
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
	for i := range ps {
		bp := &ps[i]
		mode := bp.onError.String()
		if m != nil {
			m.StoreFallback(ctx, bp.name, mode)
		}
		g.count(ctx, bp.name, "global", "error")
		span.AddEvent("store_fallback", trace.WithAttributes(telemetry.AttrPolicy.String(bp.name), attribute.String("mode", mode)))
	}
}

// closedPolicy names the policy that refused an Unavailable decision: the
// first non-shadow one whose on_store_error is closed.
func closedPolicy(ps []boundPolicy, d ratelimit.Decision) string {
	for i, res := range d.Results {
		if res.Fallback == ratelimit.OnErrorClosed && !ps[i].shadow {
			return ps[i].name
		}
	}
	return ps[0].name
}

// decidedLocally reports whether a policy of a fallback decision was
// decided on its local share; otherwise every policy was let through.
func decidedLocally(d ratelimit.Decision) bool {
	for _, res := range d.Results {
		if res.Fallback == ratelimit.OnErrorLocal {
			return true
		}
	}
	return false
}
