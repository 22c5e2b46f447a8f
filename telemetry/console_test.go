package telemetry

import (
	"context"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// TestConsoleAction: every action's and result's series exists at 0 from
// the start, each action counts once under its labels, unknown values are
// not counted, and a nil Metrics does nothing.
func TestConsoleAction(t *testing.T) {
	m, p := newTestMetrics(t)
	const name = "quotagate_console_actions_total"
	want := map[string]float64{}
	for _, a := range []string{"reset", "grant"} {
		for _, r := range []string{"applied", "refused", "failed"} {
			want["action="+a+",result="+r] = 0
		}
	}
	equalSeries(t, "fresh", series(t, scrape(t, p.Metrics), name, dto.MetricType_COUNTER), want)
	m.ConsoleAction(ConsoleGrant, ConsoleApplied)
	m.ConsoleAction(ConsoleGrant, ConsoleApplied)
	m.ConsoleAction(ConsoleReset, ConsoleRefused)
	m.ConsoleAction(ConsoleReset, ConsoleFailed)
	m.ConsoleAction("delete", ConsoleApplied)
	m.ConsoleAction(ConsoleGrant, "maybe")
	var none *Metrics
	none.ConsoleAction(ConsoleGrant, ConsoleApplied)
	want["action=grant,result=applied"] = 2
	want["action=reset,result=refused"] = 1
	want["action=reset,result=failed"] = 1
	equalSeries(t, "counted", series(t, scrape(t, p.Metrics), name, dto.MetricType_COUNTER), want)
}

// TestConsoleTotalsAreTheScrapedCounters: what the console's history
// samples is what /metrics exports: decisions of the store stages (not
// stage 1) and their denials, stage 1's denials, fallbacks, store errors,
// and the decide latency's buckets.
func TestConsoleTotalsAreTheScrapedCounters(t *testing.T) {
	m, p := newTestMetrics(t)
	ctx := context.Background()
	for range 3 {
		m.Decision(ctx, "tenant", "global", ResultAllowed)
	}
	m.Decision(ctx, "tenant", "global", ResultDenied)
	m.Decision(ctx, "tenant", "fallback", ResultDenied)
	m.Decision(ctx, "audit", "global", ResultShadowDenied)
	m.Decision(ctx, "local", "local", ResultDenied)
	m.Decision(ctx, "local", "local", ResultAllowed)
	m.CountDecision(m.DecisionSeries("transfers", "global", ResultDenied))
	m.StoreFallback(ctx, "tenant", FallbackOpen)
	m.StoreFallback(ctx, "transfers", FallbackClosed)
	m.StoreError(ctx, "timeout")
	m.StoreCall(ctx, "decide", 30*time.Microsecond) // first bucket (<= 50 µs)
	m.StoreCall(ctx, "decide", 2*time.Millisecond)  // <= 2.5 ms
	m.StoreCall(ctx, "decide", 2*time.Second)       // above every bound
	m.StoreCall(ctx, "settle", time.Millisecond)    // another op

	got := m.ConsoleTotals()
	fams := scrape(t, p.Metrics)
	sum := func(name string, keep func(*dto.Metric) bool) int64 {
		var n float64
		for _, s := range fams[name].GetMetric() {
			if keep(s) {
				n += s.GetCounter().GetValue()
			}
		}
		return int64(n)
	}
	label := func(s *dto.Metric, k string) string {
		for _, l := range s.GetLabel() {
			if l.GetName() == k {
				return l.GetValue()
			}
		}
		return ""
	}
	all := func(*dto.Metric) bool { return true }
	want := ConsoleTotals{
		Decisions:   sum("quotagate_decisions_total", func(s *dto.Metric) bool { return label(s, "stage") != "local" }),
		Denied:      sum("quotagate_decisions_total", func(s *dto.Metric) bool { return label(s, "stage") != "local" && label(s, "result") == "denied" }),
		LocalDenied: sum("quotagate_decisions_total", func(s *dto.Metric) bool { return label(s, "stage") == "local" && label(s, "result") == "denied" }),
		Fallbacks:   sum("quotagate_store_fallback_total", all),
		StoreErrors: sum("quotagate_store_errors_total", all),
	}
	if want.Decisions != 7 || want.Denied != 3 || want.LocalDenied != 1 || want.Fallbacks != 2 || want.StoreErrors != 1 {
		t.Fatalf("the scrape holds %+v: the test's counts are off", want)
	}
	if got.Decisions != want.Decisions || got.Denied != want.Denied || got.LocalDenied != want.LocalDenied ||
		got.Fallbacks != want.Fallbacks || got.StoreErrors != want.StoreErrors {
		t.Errorf("ConsoleTotals = %+v, want the scrape's %+v", got, want)
	}
	bounds := StoreCallBounds()
	wantBuckets := make([]uint64, len(bounds)+1)
	wantBuckets[0], wantBuckets[slices.Index(bounds, 0.0025)], wantBuckets[len(bounds)] = 1, 1, 1
	if !slices.Equal(got.StoreDecide, wantBuckets) {
		t.Errorf("decide buckets %v, want %v (bounds %v)", got.StoreDecide, wantBuckets, bounds)
	}
	var none *Metrics
	if z := none.ConsoleTotals(); z.Decisions != 0 || len(z.StoreDecide) != len(bounds)+1 {
		t.Errorf("a nil Metrics reads %+v", z)
	}
}
