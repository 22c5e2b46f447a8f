package gateway

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// TestMetricsRecordTheRequestSeries checks the series an admitted or
// locally denied request records in, which the request path resolves once
// per configuration: every count lands under its own attributes (stage-1
// decisions, the decision durations of both stages, the store call, the
// upstream duration by route, the policies' global decisions).
func TestMetricsRecordTheRequestSeries(t *testing.T) {
	o := newObservedFixture(t)
	for range 6 { // anonymous tier: stage 1 admits a burst of 5 and denies the 6th
		o.do("GET", "/v1/transfers/1", nil, nil)
	}
	families := o.scrape(t)
	value := func(name string, labels map[string]string) float64 {
		t.Helper()
		var sum float64
		for _, m := range families[name].GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			if len(have) != len(labels) {
				continue
			}
			match := true
			for k, v := range labels {
				match = match && have[k] == v
			}
			if match {
				if families[name].GetType() == dto.MetricType_HISTOGRAM {
					sum += float64(m.GetHistogram().GetSampleCount())
				} else {
					sum += m.GetCounter().GetValue()
				}
			}
		}
		return sum
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"quotagate_decisions_total", map[string]string{"policy": "local", "stage": "local", "result": "allowed"}, 5},
		{"quotagate_decisions_total", map[string]string{"policy": "local", "stage": "local", "result": "denied"}, 1},
		{"quotagate_decisions_total", map[string]string{"policy": "tenant", "stage": "global", "result": "allowed"}, 5},
		{"quotagate_decision_duration_seconds", map[string]string{"stage": "local"}, 6},
		{"quotagate_decision_duration_seconds", map[string]string{"stage": "global"}, 5},
		{"quotagate_store_call_duration_seconds", map[string]string{"op": "decide"}, 5},
		{"quotagate_upstream_duration_seconds", map[string]string{"route": "transfers.get"}, 5},
		{"quotagate_requests_total", map[string]string{"route": "transfers.get", "code": "200"}, 5},
	} {
		if got := value(c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}
