package telemetry

import (
	"context"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// histograms returns the sample count of each series of a histogram family,
// by labels, and checks that every series has every bucket.
func histograms(t *testing.T, fams map[string]*dto.MetricFamily, name string, buckets int) map[string]uint64 {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("family %s missing", name)
	}
	if f.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("family %s type %v, want histogram", name, f.GetType())
	}
	out := map[string]uint64{}
	for _, m := range f.GetMetric() {
		k := labels(m)
		if _, dup := out[k]; dup {
			t.Fatalf("%s{%s} exported twice", name, k)
		}
		out[k] = m.GetHistogram().GetSampleCount()
		if n := len(m.GetHistogram().GetBucket()); n != buckets && n != buckets+1 { // +Inf may be explicit
			t.Errorf("%s{%s}: %d buckets, want %d", name, k, n, buckets)
		}
	}
	return out
}

func TestPrimeExportsEverySeriesAtZero(t *testing.T) {
	m, p := newTestMetrics(t)
	p.ExportPrimed(m)
	m.Prime(Series{
		Decisions:   [][3]string{{"tenant", "global", ResultAllowed}, {"tenant", "global", ResultDenied}},
		Fallbacks:   [][2]string{{"tenant", FallbackClosed}},
		StoreErrors: []string{"timeout", "invalid"},
		Routes:      []string{"a", "b"},
		Codes:       []int{200, 429},
		Stages:      []string{"local", "global"},
		Ops:         []string{"decide"},
	})
	if err := m.ObserveHotKeys(func() []float64 { return nil }); err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, p.Metrics)
	counter := dto.MetricType_COUNTER
	equalSeries(t, "decisions", series(t, fams, "quotagate_decisions_total", counter), map[string]float64{
		"policy=tenant,result=allowed,stage=global": 0, "policy=tenant,result=denied,stage=global": 0})
	equalSeries(t, "fallback", series(t, fams, "quotagate_store_fallback_total", counter), map[string]float64{"mode=closed,policy=tenant": 0})
	equalSeries(t, "store errors", series(t, fams, "quotagate_store_errors_total", counter), map[string]float64{"kind=invalid": 0, "kind=timeout": 0})
	equalSeries(t, "requests", series(t, fams, "quotagate_requests_total", counter), map[string]float64{
		"code=200,route=a": 0, "code=429,route=a": 0, "code=200,route=b": 0, "code=429,route=b": 0})
	hot := series(t, fams, "quotagate_hot_key_decisions_rate", dto.MetricType_GAUGE)
	if len(hot) != MaxHotKeyRanks || hot["rank=1"] != 0 || hot["rank=10"] != 0 {
		t.Errorf("hot key ranks %v, want all %d at 0", hot, MaxHotKeyRanks)
	}
	for name, want := range map[string]map[string]uint64{
		"quotagate_decision_duration_seconds":   {"stage=global": 0, "stage=local": 0},
		"quotagate_store_call_duration_seconds": {"op=decide": 0},
		"quotagate_upstream_duration_seconds":   {"route=a": 0, "route=b": 0},
	} {
		buckets := len(latencyBuckets)
		if name == "quotagate_upstream_duration_seconds" {
			buckets = len(upstreamBuckets)
		}
		got := histograms(t, fams, name, buckets)
		if len(got) != len(want) {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
		for k, v := range want {
			if c, ok := got[k]; !ok || c != v {
				t.Errorf("%s{%s}: count %d (present %t), want %d", name, k, c, ok, v)
			}
		}
	}

	// A recorded series replaces its empty one; the others stay empty. A
	// new Prime replaces the empty histogram series of the last.
	m.UpstreamDuration(context.Background(), "a", 10*time.Millisecond)
	m.Prime(Series{Routes: []string{"a", "c"}, Stages: []string{"global"}})
	fams = scrape(t, p.Metrics)
	got := histograms(t, fams, "quotagate_upstream_duration_seconds", len(upstreamBuckets))
	if len(got) != 2 || got["route=a"] != 1 || got["route=c"] != 0 {
		t.Errorf("upstream after a recording and a new Prime: %v, want route a at 1 and c at 0", got)
	}
	if _, ok := fams["quotagate_store_call_duration_seconds"]; ok {
		t.Error("store call histogram still exported after a Prime without ops")
	}
}

// TestPrimeWithoutExportPrimed: counters are primed whatever the handler;
// empty histograms need the attachment.
func TestPrimeWithoutExportPrimed(t *testing.T) {
	m, p := newTestMetrics(t)
	m.Prime(Series{Routes: []string{"a"}, Codes: []int{429}, Stages: []string{"local"}})
	fams := scrape(t, p.Metrics)
	equalSeries(t, "requests", series(t, fams, "quotagate_requests_total", dto.MetricType_COUNTER), map[string]float64{"code=429,route=a": 0})
	if _, ok := fams["quotagate_decision_duration_seconds"]; ok {
		t.Error("empty histograms exported without ExportPrimed")
	}
}
