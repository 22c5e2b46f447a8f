package gateway

import (
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// documentedMetricFamilies returns the metric names of the metrics
// reference's table (docs/reference/metrics.md).
func documentedMetricFamilies(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../docs/reference/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile("(?m)^\\| `(quotagate_[a-z_]+)` \\|").FindAllStringSubmatch(string(b), -1)
	if len(names) < 10 {
		t.Fatalf("docs/reference/metrics.md lists %d metric families; the table was not found", len(names))
	}
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n[1]
	}
	return out
}

// freshValues are the documented families that a fresh gateway does not
// report at 0: the fleet's size is at least this instance.
var freshValues = map[string]float64{"quotagate_fleet_size": 1}

// TestFreshGatewayExportsEveryDocumentedMetric scrapes a gateway that has
// not served a request: every family of the metrics reference is there,
// every series at zero, with the series the configuration can produce.
func TestFreshGatewayExportsEveryDocumentedMetric(t *testing.T) {
	o := newObservedFixture(t)
	rec := httptest.NewRecorder()
	o.metrics.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, body)
	}
	documented := map[string]bool{}
	for _, name := range documentedMetricFamilies(t) {
		documented[name] = true
	}
	// And the other way: every quotagate family this gateway exports is
	// in the reference (the families only a fleet on Redis reports are
	// checked by the binary's test in cmd/quotagate).
	for name := range fams {
		if strings.HasPrefix(name, "quotagate_") && !documented[name] {
			t.Errorf("%s: exported but not in docs/reference/metrics.md", name)
		}
	}
	for _, name := range documentedMetricFamilies(t) {
		f, ok := fams[name]
		if !ok || len(f.GetMetric()) == 0 {
			t.Errorf("%s: not exported by a fresh gateway", name)
			continue
		}
		for _, m := range f.GetMetric() {
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
			if want := freshValues[name]; v != want {
				t.Errorf("%s%v = %v on a fresh gateway, want %v", name, m.GetLabel(), v, want)
			}
		}
	}
	for _, want := range []string{
		`quotagate_decisions_total{policy="tenant",result="denied",stage="global"} 0`,
		`quotagate_store_fallback_total{mode="open",policy="tenant"} 0`,
		`quotagate_requests_total{code="429",route="transfers.create"} 0`,
		`quotagate_upstream_duration_seconds_count{route="transfers.create"} 0`,
		`quotagate_decision_duration_seconds_bucket{stage="global",le="+Inf"} 0`,
		`quotagate_store_errors_total{kind="breaker_open"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("fresh /metrics lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
}

// TestReloadPrimesNewSeries: a policy and a route added by a reload are
// exported at zero before their first request.
func TestReloadPrimesNewSeries(t *testing.T) {
	o := newObservedFixture(t)
	text, err := os.ReadFile(o.path)
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(text), "upstreams:\n", `  reports:
    on_store_error: local
    limits:
      "*": {rate: 5, per: 1s, burst: 5}
upstreams:
`, 1)
	changed = strings.Replace(changed, "routes:\n", "routes:\n  - {name: reports.get, method: GET, path: \"/v1/reports\", upstream: payments, policies: [reports]}\n", 1)
	if err := os.WriteFile(o.path, []byte(changed), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := o.gw.ReloadFile(o.path); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	o.metrics.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`quotagate_decisions_total{policy="reports",result="allowed",stage="global"} 0`,
		`quotagate_decisions_total{policy="reports",result="denied",stage="fallback"} 0`,
		`quotagate_store_fallback_total{mode="local",policy="reports"} 0`,
		`quotagate_requests_total{code="429",route="reports.get"} 0`,
		`quotagate_upstream_duration_seconds_count{route="reports.get"} 0`,
		`quotagate_config_reloads_total{result="ok"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("after the reload /metrics lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
}
