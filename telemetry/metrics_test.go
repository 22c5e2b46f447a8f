package telemetry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape fetches and parses the Prometheus exposition from h.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape status %d: %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("Content-Type = %q, want text/plain", ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parse exposition: %v", err)
	}
	return fams
}

// labels renders a metric's labels as "k=v,k=v", sorted by name.
func labels(m *dto.Metric) string {
	var parts []string
	for _, lp := range m.GetLabel() {
		parts = append(parts, lp.GetName()+"="+lp.GetValue())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// series returns the value of each series of a counter or gauge family, by
// labels.
func series(t *testing.T, fams map[string]*dto.MetricFamily, name string, typ dto.MetricType) map[string]float64 {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("family %s missing", name)
	}
	if f.GetType() != typ {
		t.Fatalf("family %s type %v, want %v", name, f.GetType(), typ)
	}
	out := map[string]float64{}
	for _, m := range f.GetMetric() {
		switch typ {
		case dto.MetricType_COUNTER:
			out[labels(m)] = m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			out[labels(m)] = m.GetGauge().GetValue()
		}
	}
	return out
}

func equalSeries(t *testing.T, name string, got, want map[string]float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: got %v, want %v", name, got, want)
		return
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s{%s} = %v, want %v (all: %v)", name, k, got[k], v, got)
		}
	}
}

func newTestMetrics(t *testing.T) (*Metrics, *Providers) {
	t.Helper()
	p, err := Setup(context.Background(), Options{Getenv: mapEnv(nil), InstanceID: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	m, err := NewMetrics(p.MeterProvider)
	if err != nil {
		t.Fatal(err)
	}
	return m, p
}

func TestPrometheusExposition(t *testing.T) {
	m, p := newTestMetrics(t)
	ctx := context.Background()
	m.Decision(ctx, "transfers", "local", ResultAllowed)
	m.Decision(ctx, "transfers", "local", ResultAllowed)
	m.Decision(ctx, "transfers", "global", ResultDenied)
	m.Decision(ctx, "search", "global", ResultShadowDenied)
	m.DecisionDuration(ctx, "global", 300*time.Microsecond)
	m.DecisionDuration(ctx, "global", 2*time.Millisecond)
	m.DecisionDuration(ctx, "local", -time.Second)
	m.StoreError(ctx, "timeout")
	m.StoreFallback(ctx, "transfers", FallbackLocal)
	m.Request(ctx, "transfers", 429)
	m.Request(ctx, "transfers", 200)
	m.Request(ctx, "transfers", 200)
	m.ConfigReload(ctx, true)
	m.ConfigReload(ctx, false)
	m.ConfigReload(ctx, false)
	m.StoreCall(ctx, "check", time.Millisecond)
	m.UpstreamDuration(ctx, "transfers", 40*time.Millisecond)
	var breaker, limiters atomic.Int64
	breaker.Store(BreakerOpen)
	limiters.Store(12)
	if err := m.ObserveGauges(breaker.Load, limiters.Load); err != nil {
		t.Fatal(err)
	}

	fams := scrape(t, p.Metrics)
	counter, gauge := dto.MetricType_COUNTER, dto.MetricType_GAUGE
	equalSeries(t, "decisions", series(t, fams, "quotagate_decisions_total", counter), map[string]float64{
		"policy=transfers,result=allowed,stage=local":     2,
		"policy=transfers,result=denied,stage=global":     1,
		"policy=search,result=shadow_denied,stage=global": 1,
	})
	equalSeries(t, "store errors", series(t, fams, "quotagate_store_errors_total", counter),
		map[string]float64{"kind=timeout": 1})
	equalSeries(t, "fallback", series(t, fams, "quotagate_store_fallback_total", counter),
		map[string]float64{"mode=local,policy=transfers": 1})
	equalSeries(t, "requests", series(t, fams, "quotagate_requests_total", counter),
		map[string]float64{"code=200,route=transfers": 2, "code=429,route=transfers": 1})
	equalSeries(t, "reloads", series(t, fams, "quotagate_config_reloads_total", counter),
		map[string]float64{"result=ok": 1, "result=error": 2})
	equalSeries(t, "breaker", series(t, fams, "quotagate_store_breaker_state", gauge), map[string]float64{"": 2})
	equalSeries(t, "limiters", series(t, fams, "quotagate_local_limiters", gauge), map[string]float64{"": 12})

	// Gauges read through the functions at each scrape.
	breaker.Store(BreakerClosed)
	equalSeries(t, "breaker after change", series(t, scrape(t, p.Metrics), "quotagate_store_breaker_state", gauge),
		map[string]float64{"": 0})

	hist := fams["quotagate_decision_duration_seconds"]
	if hist == nil || hist.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("quotagate_decision_duration_seconds missing or not a histogram: %v", hist)
	}
	byStage := map[string]*dto.Histogram{}
	for _, mm := range hist.GetMetric() {
		byStage[labels(mm)] = mm.GetHistogram()
	}
	g := byStage["stage=global"]
	if g.GetSampleCount() != 2 || g.GetSampleSum() < 0.0022 || g.GetSampleSum() > 0.0024 {
		t.Errorf("global histogram count=%d sum=%v, want 2 and 0.0023", g.GetSampleCount(), g.GetSampleSum())
	}
	if l := byStage["stage=local"]; l.GetSampleCount() != 1 || l.GetSampleSum() != 0 {
		t.Errorf("negative duration: count=%d sum=%v, want 1 and 0", l.GetSampleCount(), l.GetSampleSum())
	}
	bounds := map[float64]uint64{}
	for _, b := range g.GetBucket() {
		bounds[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	for ub, want := range map[float64]uint64{0.00005: 0, 0.00025: 0, 0.0005: 1, 0.001: 1, 0.0025: 2, 1: 2} {
		if got, ok := bounds[ub]; !ok || got != want {
			t.Errorf("bucket le=%v: %d (present %v), want %d", ub, got, ok, want)
		}
	}
	for _, name := range []string{"quotagate_store_call_duration_seconds", "quotagate_upstream_duration_seconds"} {
		if f := fams[name]; f == nil || f.GetType() != dto.MetricType_HISTOGRAM {
			t.Errorf("%s missing or not a histogram", name)
		}
	}
	if f := fams["quotagate_store_call_duration_seconds"]; f != nil && labels(f.GetMetric()[0]) != "op=check" {
		t.Errorf("store call labels = %s", labels(f.GetMetric()[0]))
	}
	// Contract: no target_info, no scope labels, and every quotagate family is
	// one of the documented names.
	known := map[string]bool{
		"quotagate_decisions_total": true, "quotagate_decision_duration_seconds": true,
		"quotagate_store_errors_total": true, "quotagate_store_fallback_total": true,
		"quotagate_requests_total": true, "quotagate_config_reloads_total": true,
		"quotagate_store_call_duration_seconds": true, "quotagate_upstream_duration_seconds": true,
		"quotagate_store_breaker_state": true, "quotagate_local_limiters": true,
		"quotagate_rls_unauthenticated_total": true,
		"quotagate_quota_reads_refused_total": true,
		"quotagate_console_actions_total":     true,
		"quotagate_body_timeouts_total":       true, "quotagate_body_over_budget_total": true,
		"quotagate_log_lines_dropped_total": true,
	}
	if _, ok := fams["target_info"]; ok {
		t.Error("target_info exported")
	}
	for name, f := range fams {
		if strings.HasPrefix(name, "quotagate") && !known[name] {
			t.Errorf("unexpected family %s", name)
		}
		for _, mm := range f.GetMetric() {
			if strings.Contains(labels(mm), "otel_scope") {
				t.Errorf("%s has scope labels: %s", name, labels(mm))
			}
		}
	}
	if _, ok := fams["go_goroutines"]; !ok {
		t.Error("Go runtime metrics missing")
	}
}

func TestReloadSeriesStartAtZero(t *testing.T) {
	_, p := newTestMetrics(t)
	equalSeries(t, "reloads", series(t, scrape(t, p.Metrics), "quotagate_config_reloads_total", dto.MetricType_COUNTER),
		map[string]float64{"result=ok": 0, "result=error": 0})
}

func TestObserveGaugesReplaceAndClear(t *testing.T) {
	m, p := newTestMetrics(t)
	if err := m.ObserveGauges(func() int64 { return 1 }, nil); err != nil {
		t.Fatal(err)
	}
	if err := m.ObserveGauges(func() int64 { return 2 }, func() int64 { return 5 }); err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, p.Metrics)
	equalSeries(t, "breaker", series(t, fams, "quotagate_store_breaker_state", dto.MetricType_GAUGE), map[string]float64{"": 2})
	equalSeries(t, "limiters", series(t, fams, "quotagate_local_limiters", dto.MetricType_GAUGE), map[string]float64{"": 5})
	if err := m.ObserveGauges(nil, nil); err != nil {
		t.Fatal(err)
	}
	fams = scrape(t, p.Metrics)
	if _, ok := fams["quotagate_store_breaker_state"]; ok {
		t.Error("breaker gauge still reported after clearing")
	}
}

func TestNilMetricsIsNoop(t *testing.T) {
	var m *Metrics
	ctx := context.Background()
	m.Decision(ctx, "p", "local", ResultAllowed)
	m.DecisionDuration(ctx, "local", time.Millisecond)
	m.StoreError(ctx, "timeout")
	m.StoreFallback(ctx, "p", FallbackOpen)
	m.Request(ctx, "r", 200)
	m.ConfigReload(ctx, true)
	m.StoreCall(ctx, "check", time.Millisecond)
	m.UpstreamDuration(ctx, "r", time.Millisecond)
	if err := m.ObserveGauges(nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := NewMetrics(nil); err == nil {
		t.Fatal("NewMetrics(nil) succeeded")
	}
}

func TestMetricsConcurrent(t *testing.T) {
	m, p := newTestMetrics(t)
	ctx := context.Background()
	policies := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	m.exemplars.Store(int32(exemplarsAlways)) // every recording takes its bucket's exemplar
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 200 {
				m.Decision(ctx, policies[(i+w)%len(policies)], "global", ResultAllowed)
				m.Request(ctx, "r", 200+i%5)
				m.UpstreamDuration(ctx, policies[(i+w)%len(policies)], time.Duration(i)*time.Millisecond)
			}
		})
	}
	wg.Go(func() {
		for range 5 { // t.Fatal is not allowed off the test goroutine
			rec := httptest.NewRecorder()
			p.Metrics.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
			if rec.Code != http.StatusOK {
				t.Errorf("scrape status %d", rec.Code)
			}
		}
	})
	wg.Wait()
	got := series(t, scrape(t, p.Metrics), "quotagate_decisions_total", dto.MetricType_COUNTER)
	total := 0.0
	for _, v := range got {
		total += v
	}
	if len(got) != len(policies) || total != 800 {
		t.Fatalf("decisions: %d series totalling %v, want %d and 800", len(got), total, len(policies))
	}
	var count uint64
	for _, f := range scrape(t, p.Metrics)["quotagate_upstream_duration_seconds"].GetMetric() {
		h := f.GetHistogram()
		if n := h.GetBucket()[len(h.GetBucket())-1].GetCumulativeCount(); n != h.GetSampleCount() {
			t.Errorf("%s: %d in the last bucket, count %d", labels(f), n, h.GetSampleCount())
		}
		count += h.GetSampleCount()
	}
	if count != 800 {
		t.Fatalf("upstream durations: %d recorded, want 800", count)
	}
}

func TestObserveHotKeysReplacesTheCallback(t *testing.T) {
	p, err := Setup(context.Background(), Options{Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	m, err := NewMetrics(p.MeterProvider)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.ObserveHotKeys(func() []float64 { return []float64{1} }); err != nil {
		t.Fatal(err)
	}
	if err := m.ObserveHotKeys(func() []float64 { return []float64{7} }); err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	p.Metrics.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	body := w.Body.String()
	if strings.Count(body, `quotagate_hot_key_decisions_rate{rank="1"}`) != 1 || !strings.Contains(body, `quotagate_hot_key_decisions_rate{rank="1"} 7`) {
		t.Fatalf("want exactly one rank-1 series with the second callback's value:\n%s", body)
	}
}
