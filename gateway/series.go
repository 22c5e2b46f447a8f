package gateway

import "github.com/quotagate/quotagate/telemetry"

// requestSeries are the metric series of a Gateway that do not depend on
// the configuration, resolved once in New so that the request path
// records without looking its label values up (telemetry.DecisionSeries).
type requestSeries struct {
	localAllowed, localDenied telemetry.DecisionSeries
	stageLocal, stageGlobal   telemetry.StageSeries
	opDecide                  telemetry.OpSeries
}

func newRequestSeries(m *telemetry.Metrics) requestSeries {
	return requestSeries{
		localAllowed: m.DecisionSeries(localPolicy, "local", telemetry.ResultAllowed),
		localDenied:  m.DecisionSeries(localPolicy, "local", telemetry.ResultDenied),
		stageLocal:   m.StageSeries("local"),
		stageGlobal:  m.StageSeries("global"),
		opDecide:     m.OpSeries("decide"),
	}
}

// policySeries are a bound policy's series of quotagate_decisions_total in
// the global stage, by result.
type policySeries struct {
	allowed, denied, shadowDenied telemetry.DecisionSeries
}

// attachSeries resolves the series every route and bound policy of rs
// records in on m (nothing when m is nil).
func attachSeries(rs []*route, m *telemetry.Metrics) {
	bind := func(ps []boundPolicy) {
		for i := range ps {
			bp := &ps[i]
			bp.series = policySeries{
				allowed:      m.DecisionSeries(bp.name, "global", telemetry.ResultAllowed),
				denied:       m.DecisionSeries(bp.name, "global", telemetry.ResultDenied),
				shadowDenied: m.DecisionSeries(bp.name, "global", telemetry.ResultShadowDenied),
			}
		}
	}
	for _, r := range rs {
		series := m.RouteSeries(r.name)
		for c := r; c != nil; c = c.fallback {
			c.upstream = series
		}
		r.eachBinding(bind)
	}
}
