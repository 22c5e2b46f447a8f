package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/telemetry"
)

type observed struct {
	*fixture
	spans   *tracetest.InMemoryExporter
	metrics http.Handler
}

// scrape reads the gateway's /metrics, by family name.
func (o *observed) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	w := httptest.NewRecorder()
	o.metrics.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(w.Body.String()))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return families
}

// newObservedFixture is newFixture with a recording tracer and the real
// metrics pipeline (OpenTelemetry SDK -> Prometheus exporter).
func newObservedFixture(t *testing.T) *observed {
	t.Helper()
	return newObservedFixtureWith(t, baseConfig, nil)
}

// newObservedFixtureWith is newObservedFixture for the config base; DEADURL
// becomes dead's URL when dead is not nil.
func newObservedFixtureWith(t *testing.T, base string, dead *httptest.Server) *observed {
	t.Helper()
	return newTracedFixture(t, base, dead, func(exp sdktrace.SpanExporter) trace.TracerProvider {
		return sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	})
}

// newTracedFixture is newObservedFixtureWith with the tracer provider that
// newTP builds around the fixture's span exporter.
func newTracedFixture(t *testing.T, base string, dead *httptest.Server, newTP func(sdktrace.SpanExporter) trace.TracerProvider) *observed {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := newTP(exp)
	tel, m := newTestMetrics(t)
	f := &fixture{clock: newTestClock(), upstream: newUpstream(t)}
	deadAt := ""
	if dead != nil {
		deadAt = dead.URL
	} else {
		deadAt = deadURL(t)
	}
	f.path = writeConfig(t, renderConfig(base, f.upstream.srv.URL, deadAt))
	cfg, err := config.Load(f.path, testGetenv)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := New(cfg, Options{
		Now: f.clock.Now, Getenv: testGetenv, Metrics: m, TracerProvider: tp,
		Propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		OpenStore: func(c config.Store) (*stack.Stack, error) {
			return stack.New(nil, stack.Options{Now: f.clock.Now, FleetSize: c.FleetSize}), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	f.gw = gw
	return &observed{fixture: f, spans: exp, metrics: tel.Metrics}
}

// newTestMetrics sets up the real metrics pipeline (OpenTelemetry SDK ->
// Prometheus exporter, primed series included), shut down when t ends.
func newTestMetrics(t testing.TB) (*telemetry.Providers, *telemetry.Metrics) {
	t.Helper()
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	m, err := telemetry.NewMetrics(tel.MeterProvider)
	if err != nil {
		t.Fatal(err)
	}
	tel.ExportPrimed(m)
	return tel, m
}

func spanAttrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestDeniedRequestIsTracedPerStage(t *testing.T) {
	o := newObservedFixture(t)
	const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	hdr := map[string]string{"Authorization": "Bearer " + freeKey, "traceparent": "00-" + callerTrace + "-00f067aa0ba902b7-01"}
	if w := o.do("POST", "/v1/transfers/secret-42", hdr, nil); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	up, _ := o.upstream.Last()
	if tp := up.Header.Get("traceparent"); !strings.Contains(tp, callerTrace) {
		t.Fatalf("upstream traceparent %q lacks the caller's trace id", tp)
	}
	o.spans.Reset()
	if w := o.do("POST", "/v1/transfers/secret-42", hdr, nil); w.Code != 429 {
		t.Fatalf("second: %d", w.Code)
	}
	var global, server *tracetest.SpanStub
	spans := o.spans.GetSpans()
	for i := range spans {
		s := &spans[i]
		if s.SpanContext.TraceID().String() != callerTrace {
			t.Errorf("span %s has trace %s, not the caller's", s.Name, s.SpanContext.TraceID())
		}
		switch s.Name {
		case "quotagate.stage.global":
			global = s
		case "quotagate.request":
			server = s
		}
		for _, kv := range s.Attributes {
			v := kv.Value.String()
			for _, leak := range []string{"secret-42", "acme", freeKey, sha256Hex(freeKey)} {
				if strings.Contains(v, leak) {
					t.Errorf("span %s attribute %s = %q leaks %q", s.Name, kv.Key, v, leak)
				}
			}
		}
	}
	if global == nil || server == nil {
		t.Fatalf("spans: %v", spans)
	}
	if global.Parent.SpanID() != server.SpanContext.SpanID() {
		t.Error("the global stage span is not a child of the request span")
	}
	a := spanAttrs(*global)
	want := map[string]string{"quotagate.route": "transfers.create", "quotagate.policy": "tenant", "quotagate.decision": "denied", "quotagate.stage": "global"}
	for k, v := range want {
		if got := a[attribute.Key(k)].String(); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if a["quotagate.retry_after_ms"].AsInt64() != 5000 || a["quotagate.remaining"].AsInt64() != 0 {
		t.Errorf("retry_after_ms %v remaining %v", a["quotagate.retry_after_ms"].String(), a["quotagate.remaining"].String())
	}
	if c := a["quotagate.caller"].String(); len(c) != 16 {
		t.Errorf("quotagate.caller = %q, want a 16-hex hash", c)
	}
}

// With the provider quotagate serve runs with, a caller's unsampled trace
// builds no span at all (none reaches the exporter), yet the upstream gets
// the caller's traceparent unchanged; a sampled one is recorded in full.
func TestUnsampledRequestRecordsNoSpanButPropagates(t *testing.T) {
	o := newTracedFixture(t, baseConfig, nil, func(exp sdktrace.SpanExporter) trace.TracerProvider {
		tp, err := telemetry.NewTracerProvider(func(string) string { return "" }, true, sdktrace.WithSyncer(exp))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		return tp
	})
	const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	unsampled := "00-" + callerTrace + "-00f067aa0ba902b7-00"
	if w := o.do("GET", "/v1/transfers/1", map[string]string{"Authorization": "Bearer " + freeKey, "traceparent": unsampled}, nil); w.Code != 200 {
		t.Fatalf("unsampled: %d", w.Code)
	}
	up, _ := o.upstream.Last()
	if got := up.Header.Get("traceparent"); got != unsampled {
		t.Errorf("upstream traceparent %q, want the caller's %q", got, unsampled)
	}
	if spans := o.spans.GetSpans(); len(spans) != 0 {
		t.Fatalf("%d spans recorded for an unsampled request: %v", len(spans), spans)
	}

	sampled := "00-" + callerTrace + "-00f067aa0ba902b7-01"
	if w := o.do("GET", "/v1/transfers/1", map[string]string{"Authorization": "Bearer " + freeKey, "traceparent": sampled}, nil); w.Code != 200 {
		t.Fatalf("sampled: %d", w.Code)
	}
	names := map[string]string{}
	for _, s := range o.spans.GetSpans() {
		names[s.Name] = s.SpanContext.SpanID().String()
		if s.SpanContext.TraceID().String() != callerTrace {
			t.Errorf("span %s in trace %s, not the caller's", s.Name, s.SpanContext.TraceID())
		}
	}
	for _, n := range []string{"quotagate.request", "quotagate.stage.global", "quotagate.upstream"} {
		if names[n] == "" {
			t.Errorf("sampled request: no %s span (got %v)", n, names)
		}
	}
	up, _ = o.upstream.Last()
	if got, want := up.Header.Get("traceparent"), "00-"+callerTrace+"-"+names["quotagate.upstream"]+"-01"; got != want {
		t.Errorf("upstream traceparent %q, want %q (the upstream span as parent)", got, want)
	}
}

func TestMetricsCountDecisionsWithoutSensitiveLabels(t *testing.T) {
	o := newObservedFixture(t)
	o.do("POST", "/v1/transfers/secret-1", bearer(freeKey), nil)
	o.do("POST", "/v1/transfers/secret-1", bearer(freeKey), nil)
	for i := 0; i < 400; i++ { // the hot-key sampler takes about 1 in 16 at random; none in 400 has p ~ 1e-11
		o.do("GET", "/v1/audit", bearer(enterpriseKey), nil)
	}

	families := o.scrape(t)
	count := func(name string, labels map[string]string) float64 {
		var sum float64
		for _, m := range families[name].GetMetric() {
			ok := true
			for k, v := range labels {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				ok = ok && found
			}
			if ok {
				sum += m.GetCounter().GetValue()
			}
		}
		return sum
	}
	if got := count("quotagate_decisions_total", map[string]string{"policy": "tenant", "stage": "global", "result": "allowed"}); got != 1 {
		t.Errorf("tenant allowed = %v, want 1", got)
	}
	if got := count("quotagate_decisions_total", map[string]string{"policy": "tenant", "stage": "global", "result": "denied"}); got != 1 {
		t.Errorf("tenant denied = %v, want 1", got)
	}
	if got := count("quotagate_requests_total", map[string]string{"route": "transfers.create", "code": "429"}); got != 1 {
		t.Errorf("requests 429 = %v, want 1", got)
	}
	if families["quotagate_hot_key_decisions_rate"] == nil {
		t.Error("no quotagate_hot_key_decisions_rate")
	}
	if families["quotagate_decision_duration_seconds"] == nil {
		t.Error("no quotagate_decision_duration_seconds")
	}
	for name, fam := range families {
		if !strings.HasPrefix(name, "quotagate_") {
			continue
		}
		for _, m := range fam.GetMetric() {
			for _, lp := range m.GetLabel() {
				v := lp.GetValue()
				if strings.Contains(v, "secret-1") || strings.Contains(v, "acme") || strings.Contains(v, "/") || !utf8.ValidString(v) {
					t.Errorf("%s label %s=%q carries a tenant or a raw path", name, lp.GetName(), v)
				}
			}
		}
	}
}

// TestMetricsFleetSizeAndLocalDenials: quotagate_fleet_size reports the
// store's fleet size, and a denial answered again from the denial cache
// counts in quotagate_local_denials_total, a denial from the store not.
func TestMetricsFleetSizeAndLocalDenials(t *testing.T) {
	o := newObservedFixture(t)
	for range 3 { // admitted, denied by the store, denied again locally
		o.do("POST", "/v1/transfers/secret-1", bearer(freeKey), nil)
	}
	families := o.scrape(t)
	value := func(name string) float64 {
		ms := families[name].GetMetric()
		if len(ms) != 1 {
			t.Fatalf("%s: %d series, want 1", name, len(ms))
		}
		return ms[0].GetCounter().GetValue() + ms[0].GetGauge().GetValue()
	}
	if got := value("quotagate_local_denials_total"); got != 1 {
		t.Errorf("quotagate_local_denials_total = %v, want 1", got)
	}
	if got, want := value("quotagate_fleet_size"), float64(o.gw.Config().Store.FleetSize); got != want {
		t.Errorf("quotagate_fleet_size = %v, want %v", got, want)
	}
}
