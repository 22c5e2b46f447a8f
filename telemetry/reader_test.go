package telemetry

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// TestExtraProducers: OTEL_METRICS_PRODUCERS adds the producers autoexport
// knows to the readers Setup builds, once each; another name is an error
// that names the variable.
func TestExtraProducers(t *testing.T) {
	for _, tc := range []struct {
		env     string
		options int
		fails   bool
	}{
		{"", 0, false},
		{"none", 0, false},
		{"prometheus", 1, false},
		{"prometheus,none,prometheus", 1, false},
		{"prometheus,statsd", 0, true},
	} {
		t.Setenv(envMetricsProducers, tc.env)
		opts, err := extraProducers()
		if tc.fails {
			if err == nil || !strings.Contains(err.Error(), envMetricsProducers) {
				t.Errorf("%q: error %v, want one naming %s", tc.env, err, envMetricsProducers)
			}
			continue
		}
		if err != nil || len(opts) != tc.options {
			t.Errorf("%q: %d options, error %v; want %d", tc.env, len(opts), err, tc.options)
		}
	}
}

// TestPrometheusListenerServesHistograms: the listener of
// OTEL_METRICS_EXPORTER=prometheus serves the histograms kept in cells
// beside what the SDK holds, on /metrics of the address the environment
// names, and stops with its reader.
func TestPrometheusListenerServesHistograms(t *testing.T) {
	clearOTelEnv(t)
	t.Setenv(envMetricsExporter, metricsExporterPrometheus)
	t.Setenv(envPrometheusHost, "127.0.0.1")
	t.Setenv(envPrometheusPort, "0")
	var attached atomic.Pointer[Metrics]
	rd, err := newMetricReader(context.Background(), attached.Load)
	if err != nil {
		t.Fatal(err)
	}
	l, ok := rd.(prometheusListener)
	if !ok {
		t.Fatalf("reader %T, want the Prometheus listener", rd)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	m, err := NewMetrics(mp)
	if err != nil {
		t.Fatal(err)
	}
	attached.Store(m)
	m.Decision(context.Background(), "transfers", "global", ResultAllowed)
	m.StoreCall(context.Background(), "decide", 3*time.Millisecond)

	resp, err := http.Get("http://" + l.addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`quotagate_store_call_duration_seconds_bucket{op="decide",otel_scope_name="` + InstrumentationName,
		`quotagate_store_call_duration_seconds_count{op="decide"`,
		`quotagate_decisions_total{`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("no %s in\n%s", want, body)
		}
	}
	if err := mp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + l.addr.String() + "/metrics"); err == nil {
		t.Error("the listener still answers after shutdown")
	}
}
