package telemetry

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	collmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	colltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// clearOTelEnv blanks every OTEL_* variable of the process for the test, so
// that the machine's environment cannot change what Setup does.
func clearOTelEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OTEL_") {
			t.Setenv(k, "")
		}
	}
}

// mapEnv returns a Getenv reading only m.
func mapEnv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// collector is an OTLP/HTTP receiver recording every request body by path.
type collector struct {
	mu     sync.Mutex
	bodies map[string][][]byte
}

func newCollector(t *testing.T) (*collector, *httptest.Server) {
	c := &collector{bodies: map[string][][]byte{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rd io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			rd = zr
		}
		b, err := io.ReadAll(rd)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.bodies[r.URL.Path] = append(c.bodies[r.URL.Path], b)
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return c, srv
}

func (c *collector) get(path string) [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bodies[path]
}

func (c *collector) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, b := range c.bodies {
		n += len(b)
	}
	return n
}

func shutdown(t *testing.T, p *Providers) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

func resourceAttr(r *resourcepb.Resource, key string) string {
	for _, kv := range r.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

func spanAttr(attrs []*commonpb.KeyValue, key string) *commonpb.AnyValue {
	for _, kv := range attrs {
		if kv.GetKey() == key {
			return kv.GetValue()
		}
	}
	return nil
}

// emit creates one span, and one decision and one decision duration under
// it, on p's providers; it returns the span's context.
func emit(t *testing.T, p *Providers) trace.SpanContext {
	t.Helper()
	ctx, span := p.TracerProvider.Tracer(InstrumentationName).Start(context.Background(), "ratelimit.global")
	// Sampled either way; recorded only when something exports it.
	if !span.SpanContext().IsValid() || !span.SpanContext().IsSampled() || span.IsRecording() != p.tracesExported {
		t.Fatalf("span: valid=%v sampled=%v recording=%v, exported=%v", span.SpanContext().IsValid(),
			span.SpanContext().IsSampled(), span.IsRecording(), p.tracesExported)
	}
	span.SetAttributes(AttrPolicy.String("transfers"), AttrRemaining.Int64(7))
	span.End()
	m, err := NewMetrics(p.MeterProvider)
	if err != nil {
		t.Fatal(err)
	}
	m.Decision(context.Background(), "transfers", "global", ResultAllowed)
	m.DecisionDuration(ctx, "global", 2*time.Millisecond)
	return span.SpanContext()
}

func TestSetupWithoutEnvExportsNothing(t *testing.T) {
	clearOTelEnv(t)
	col, srv := newCollector(t)
	// The process environment names a reachable collector, but Getenv (what
	// Setup decides by) has no OTEL_* variable: nothing may reach it.
	t.Setenv(envOTLPEndpoint, srv.URL)
	p, err := Setup(context.Background(), Options{Getenv: mapEnv(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if p.tracesExported || p.metricsExported {
		t.Errorf("exporters attached: traces=%v metrics=%v", p.tracesExported, p.metricsExported)
	}
	emit(t, p)
	shutdown(t, p)
	if n := col.total(); n != 0 {
		t.Fatalf("collector received %d requests, want 0", n)
	}
}

func TestSetupProcessEnvDefault(t *testing.T) {
	clearOTelEnv(t) // all OTEL_* empty: os.Getenv path, nothing exported
	p, err := Setup(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, p)
	if p.tracesExported || p.metricsExported {
		t.Fatalf("exporters attached: traces=%v metrics=%v", p.tracesExported, p.metricsExported)
	}
	tp := p.TracerProvider.(*TracerProvider)
	_, span := tp.Tracer("t").Start(context.Background(), "x")
	defer span.End()
	if !span.SpanContext().IsSampled() {
		t.Fatal("default sampler should sample root spans")
	}
}

func TestSetupExporterNoneWins(t *testing.T) {
	clearOTelEnv(t)
	col, srv := newCollector(t)
	t.Setenv(envOTLPEndpoint, srv.URL)
	t.Setenv(envTracesExporter, "none")
	t.Setenv(envMetricsExporter, "none")
	p, err := Setup(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	emit(t, p)
	shutdown(t, p)
	if p.tracesExported || p.metricsExported || col.total() != 0 {
		t.Fatalf("exported despite none: traces=%v metrics=%v requests=%d",
			p.tracesExported, p.metricsExported, col.total())
	}
}

func TestSetupOTLPHTTP(t *testing.T) {
	clearOTelEnv(t)
	col, srv := newCollector(t)
	t.Setenv(envOTLPEndpoint, srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	p, err := Setup(context.Background(), Options{ServiceName: "qg-test", ServiceVersion: "1.2.3", InstanceID: "i-1"})
	if err != nil {
		t.Fatal(err)
	}
	if !p.tracesExported || !p.metricsExported {
		t.Fatalf("exporters missing: traces=%v metrics=%v", p.tracesExported, p.metricsExported)
	}
	sc := emit(t, p)
	shutdown(t, p)

	traces := col.get("/v1/traces")
	if len(traces) == 0 {
		t.Fatalf("no trace export received; paths: %v", col.bodies)
	}
	var req colltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(traces[0], &req); err != nil {
		t.Fatalf("decode traces: %v", err)
	}
	rs := req.GetResourceSpans()
	if len(rs) != 1 {
		t.Fatalf("resource spans = %d, want 1", len(rs))
	}
	for key, want := range map[string]string{
		"service.name": "qg-test", "service.version": "1.2.3", "service.instance.id": "i-1",
	} {
		if got := resourceAttr(rs[0].GetResource(), key); got != want {
			t.Errorf("resource %s = %q, want %q", key, got, want)
		}
	}
	spans := rs[0].GetScopeSpans()[0].GetSpans()
	if len(spans) != 1 || spans[0].GetName() != "ratelimit.global" {
		t.Fatalf("spans = %v, want one named ratelimit.global", spans)
	}
	if v := spanAttr(spans[0].GetAttributes(), string(AttrRemaining)); v.GetIntValue() != 7 {
		t.Errorf("%s = %v, want 7", AttrRemaining, v)
	}

	metrics := col.get("/v1/metrics")
	if len(metrics) == 0 {
		t.Fatal("no metrics export received")
	}
	var mreq collmetrics.ExportMetricsServiceRequest
	if err := proto.Unmarshal(metrics[len(metrics)-1], &mreq); err != nil {
		t.Fatalf("decode metrics: %v", err)
	}
	found, histogram := false, false
	for _, rm := range mreq.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				switch m.GetName() {
				case "quotagate.decisions":
					dp := m.GetSum().GetDataPoints()
					found = len(dp) == 1 && dp[0].GetAsInt() == 1
				case "quotagate.decision.duration":
					// Kept in cells, sent by the reader's producer; traces are
					// exported, so the sampled measurement is an exemplar.
					dp := m.GetHistogram().GetDataPoints()
					if len(dp) != 1 || dp[0].GetCount() != 1 || len(dp[0].GetExplicitBounds()) != 14 || m.GetUnit() != "s" {
						t.Fatalf("quotagate.decision.duration: unit %q, points %v", m.GetUnit(), dp)
					}
					ex := dp[0].GetExemplars()
					traceID, spanID := sc.TraceID(), sc.SpanID()
					histogram = len(ex) == 1 && ex[0].GetAsDouble() == 0.002 &&
						bytes.Equal(ex[0].GetTraceId(), traceID[:]) && bytes.Equal(ex[0].GetSpanId(), spanID[:])
					if !histogram {
						t.Errorf("quotagate.decision.duration exemplars %v, want the measurement of span %v", ex, sc)
					}
				}
			}
		}
	}
	if !found {
		t.Fatal("quotagate.decisions with value 1 not in the OTLP metrics export")
	}
	if !histogram {
		t.Fatal("quotagate.decision.duration not in the OTLP metrics export")
	}
}

// traceService is an OTLP/gRPC trace receiver.
type traceService struct {
	colltrace.UnimplementedTraceServiceServer
	mu   sync.Mutex
	reqs []*colltrace.ExportTraceServiceRequest
}

func (s *traceService) Export(_ context.Context, r *colltrace.ExportTraceServiceRequest) (*colltrace.ExportTraceServiceResponse, error) {
	s.mu.Lock()
	s.reqs = append(s.reqs, r)
	s.mu.Unlock()
	return &colltrace.ExportTraceServiceResponse{}, nil
}

func TestSetupOTLPGRPC(t *testing.T) {
	clearOTelEnv(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	svc := &traceService{}
	colltrace.RegisterTraceServiceServer(gs, svc)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)

	t.Setenv(envOTLPEndpoint, "http://"+lis.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv(envMetricsExporter, "none")
	p, err := Setup(context.Background(), Options{ServiceName: "qg-grpc"})
	if err != nil {
		t.Fatal(err)
	}
	emit(t, p)
	shutdown(t, p)

	svc.mu.Lock()
	defer svc.mu.Unlock()
	if len(svc.reqs) == 0 {
		t.Fatal("no gRPC trace export received")
	}
	rs := svc.reqs[0].GetResourceSpans()[0]
	if got := resourceAttr(rs.GetResource(), "service.name"); got != "qg-grpc" {
		t.Errorf("service.name = %q", got)
	}
	if got := rs.GetScopeSpans()[0].GetSpans()[0].GetName(); got != "ratelimit.global" {
		t.Errorf("span name = %q", got)
	}
}

func TestSetupErrors(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
	}{
		{"bad protocol", map[string]string{envOTLPEndpoint: "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"}},
		{"bad traces exporter", map[string]string{envTracesExporter: "zipkinish"}},
		{"bad metrics exporter", map[string]string{envMetricsExporter: "graphite"}},
		{"bad sampler", map[string]string{envSampler: "sometimes"}},
		{"bad sampler arg", map[string]string{envSampler: "traceidratio", envSamplerArg: "1.5"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clearOTelEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			p, err := Setup(context.Background(), Options{})
			if err == nil {
				shutdown(t, p)
				t.Fatal("Setup succeeded, want error")
			}
		})
	}
}

func TestSamplerFromEnv(t *testing.T) {
	tests := []struct {
		sampler, arg, want string
	}{
		{"", "", "ParentBased{root:AlwaysOnSampler"},
		{"parentbased_always_on", "", "ParentBased{root:AlwaysOnSampler"},
		{"ALWAYS_ON", "", "AlwaysOnSampler"},
		{"always_off", "", "AlwaysOffSampler"},
		{"parentbased_always_off", "", "ParentBased{root:AlwaysOffSampler"},
		{"traceidratio", "0.25", "TraceIDRatioBased{0.25}"},
		{"traceidratio", "", "TraceIDRatioBased{1}"},
		{"parentbased_traceidratio", "0.5", "ParentBased{root:TraceIDRatioBased{0.5}"},
	}
	for _, tc := range tests {
		s, _, err := samplerFromEnv(mapEnv(map[string]string{envSampler: tc.sampler, envSamplerArg: tc.arg}))
		if err != nil {
			t.Errorf("%q %q: %v", tc.sampler, tc.arg, err)
			continue
		}
		if got := s.Description(); !strings.HasPrefix(got, tc.want) {
			t.Errorf("%q %q: sampler %q, want prefix %q", tc.sampler, tc.arg, got, tc.want)
		}
	}
	for _, arg := range []string{"-0.1", "x", "2"} {
		if _, _, err := samplerFromEnv(mapEnv(map[string]string{envSampler: "parentbased_traceidratio", envSamplerArg: arg})); err == nil {
			t.Errorf("arg %q accepted", arg)
		}
	}
}

func TestResourceDefaults(t *testing.T) {
	res := newResource(Options{}, mapEnv(map[string]string{envServiceName: "from-env"}))
	got := map[string]string{}
	for _, kv := range res.Attributes() {
		got[string(kv.Key)] = kv.Value.String()
	}
	if got["service.name"] != "from-env" {
		t.Errorf("service.name = %q, want from-env", got["service.name"])
	}
	if got["service.instance.id"] == "" {
		t.Error("service.instance.id empty")
	}
	if _, ok := got["service.version"]; ok {
		t.Error("service.version set without ServiceVersion")
	}
	res = newResource(Options{}, mapEnv(nil))
	if v, _ := res.Set().Value(attribute.Key("service.name")); v.AsString() != DefaultServiceName {
		t.Errorf("default service.name = %q", v.AsString())
	}
}
