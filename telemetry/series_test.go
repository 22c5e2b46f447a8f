package telemetry

import (
	"context"
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// TestSeriesHandlesRecordAsTheMethods records the same measurements through
// the prebuilt series handles on one Metrics and through the methods that
// take label values on another, and requires the same exported series:
// names, attributes, counts and sums.
func TestSeriesHandlesRecordAsTheMethods(t *testing.T) {
	ctx := context.Background()
	byHandle, ph := newTestMetrics(t)
	byLabels, pl := newTestMetrics(t)

	allowed := byHandle.DecisionSeries("transfers", "global", ResultAllowed)
	denied := byHandle.DecisionSeries("transfers", "local", ResultDenied)
	global, local := byHandle.StageSeries("global"), byHandle.StageSeries("local")
	decide := byHandle.OpSeries("decide")
	route := byHandle.RouteSeries("transfers")
	for i := range 3 {
		d := time.Duration(i+1) * time.Millisecond
		byHandle.CountDecision(allowed)
		byHandle.RecordDecisionDuration(ctx, global, d)
		byHandle.RecordStoreCall(ctx, decide, 2*d)
		byHandle.RecordUpstreamDuration(ctx, route, 3*d)
		byLabels.Decision(ctx, "transfers", "global", ResultAllowed)
		byLabels.DecisionDuration(ctx, "global", d)
		byLabels.StoreCall(ctx, "decide", 2*d)
		byLabels.UpstreamDuration(ctx, "transfers", 3*d)
	}
	byHandle.CountDecision(denied)
	byHandle.RecordDecisionDuration(ctx, local, -time.Second)
	byLabels.Decision(ctx, "transfers", "local", ResultDenied)
	byLabels.DecisionDuration(ctx, "local", -time.Second)

	got, want := scrape(t, ph.Metrics), scrape(t, pl.Metrics)
	for _, name := range []string{"quotagate_decisions_total", "quotagate_decision_duration_seconds",
		"quotagate_store_call_duration_seconds", "quotagate_upstream_duration_seconds"} {
		g, w := familySummary(got[name]), familySummary(want[name])
		if len(w) == 0 {
			t.Fatalf("%s: no series recorded by the methods", name)
		}
		equalSeries(t, name, g, w)
	}
	if s := familySummary(got["quotagate_decisions_total"]); s["policy=transfers,result=allowed,stage=global"] != 3 {
		t.Errorf("decisions by handle: %v, want 3 allowed in stage global", s)
	}
}

// familySummary maps each series of f (by labels) to its counter value or,
// for a histogram, its count and sum folded into one number.
func familySummary(f *dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for _, m := range f.GetMetric() {
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			out[labels(m)] = m.GetCounter().GetValue()
		case dto.MetricType_HISTOGRAM:
			h := m.GetHistogram()
			out[labels(m)] = float64(h.GetSampleCount())*1e6 + h.GetSampleSum()
			for _, b := range h.GetBucket() {
				out[labels(m)+fmt.Sprintf(",le=%g", b.GetUpperBound())] = float64(b.GetCumulativeCount())
			}
		}
	}
	return out
}

// TestSeriesHandlesOfNilMetrics checks that handles of a nil Metrics, and
// zero handles, record nothing and do not panic.
func TestSeriesHandlesOfNilMetrics(t *testing.T) {
	var m *Metrics
	ctx := context.Background()
	m.CountDecision(m.DecisionSeries("p", "local", ResultAllowed))
	m.RecordDecisionDuration(ctx, m.StageSeries("local"), time.Millisecond)
	m.RecordStoreCall(ctx, m.OpSeries("decide"), time.Millisecond)
	m.RecordUpstreamDuration(ctx, m.RouteSeries("r"), time.Millisecond)

	live, p := newTestMetrics(t)
	live.CountDecision(DecisionSeries{})
	live.RecordDecisionDuration(ctx, StageSeries{}, time.Millisecond)
	if s := familySummary(scrape(t, p.Metrics)["quotagate_decisions_total"]); len(s) != 0 {
		t.Errorf("a zero handle counted: %v", s)
	}
}
