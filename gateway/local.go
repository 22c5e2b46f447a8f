package gateway

import (
	"net/http"
	"time"

	"github.com/quotagate/quotagate/telemetry"
)

// localPolicy is the policy name reported for stage-1 denials.
const localPolicy = "local"

// localViolated is the violated-policies list of every stage-1 denial; it is
// only read.
var localViolated = []string{localPolicy}

// localStage is stage 1: a per-instance token bucket per caller, from the
// caller's tier. It rejects obvious bursts without a store call; a denial
// here never reaches stage 2 and consumes nothing there. It never replaces
// stage 2: an allowed request always continues to it.
func (g *Gateway) localStage(p *pipeline) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			st := stateFrom(r.Context())
			set := p.tiers[st.caller.Tier]
			if set == nil {
				next.ServeHTTP(w, r)
				return
			}
			ctx, span := g.startStage(r.Context(), "quotagate.stage.local")
			now := g.opts.Now()
			ok, remaining, retry := set.Allow(st.caller.Subject, now, int(st.cost))
			lim, burst := set.Limit()
			quota := int64(burst)
			window := ceilSeconds(time.Duration(float64(burst) / float64(lim) * float64(time.Second)))
			view := rateLimitView{policy: localPolicy, quota: quota, window: window, remaining: int64(remaining)}
			result := "allowed"
			if !ok {
				result = "denied"
				view.retry = retry
				view.reset = retry
			} else if missing := quota - int64(remaining); missing > 0 {
				view.reset = time.Duration(float64(missing) / float64(lim) * float64(time.Second))
			}
			if span.IsRecording() {
				span.SetAttributes(
					telemetry.AttrStage.String("local"),
					telemetry.AttrRoute.String(st.route.name),
					telemetry.AttrPolicy.String(localPolicy),
					telemetry.AttrCaller.String(st.caller.ID),
					telemetry.AttrDecision.String(result), telemetry.AttrRemaining.Int(remaining),
					telemetry.AttrRetryAfterMS.Int64(ceilMillis(view.retry)))
			}
			span.End()
			if m := g.opts.Metrics; m != nil {
				counted := g.series.localAllowed
				if !ok {
					counted = g.series.localDenied
				}
				m.CountDecision(counted)
				m.RecordDecisionDuration(ctx, g.series.stageLocal, g.opts.Now().Sub(now))
			}
			st.limit = view
			if !ok {
				if openAISignals(st) {
					collectLocalSignals(st, view)
				}
				g.deny(w, st, view, localViolated)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
