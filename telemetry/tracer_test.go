package telemetry

import (
	"context"
	"math/rand/v2"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// The rule TracerProvider applies before building a span must agree with
// the SDK sampler of the same setting on every parent and trace id.
func TestSamplingRuleMatchesSDKSampler(t *testing.T) {
	settings := []struct{ sampler, arg string }{
		{"", ""}, {"always_on", ""}, {"always_off", ""}, {"parentbased_always_off", ""},
		{"traceidratio", "0.3"}, {"traceidratio", "0"}, {"traceidratio", "1"},
		{"parentbased_traceidratio", "0.7"}, {"parentbased_traceidratio", ""},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, st := range settings {
		s, rule, err := samplerFromEnv(mapEnv(map[string]string{envSampler: st.sampler, envSamplerArg: st.arg}))
		if err != nil {
			t.Fatal(err)
		}
		var yes, no int
		for i := 0; i < 2000; i++ {
			var tid trace.TraceID
			for j := range tid {
				tid[j] = byte(rng.Uint32())
			}
			ctx := context.Background()
			var parent trace.SpanContext
			if i%3 != 0 { // a remote parent, sampled or not
				flags := trace.TraceFlags(0)
				if i%3 == 1 {
					flags = trace.FlagsSampled
				}
				parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{1}, TraceFlags: flags, Remote: true})
				ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
			}
			want := s.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, TraceID: tid, Name: "x"}).Decision == sdktrace.RecordAndSample
			if got := rule.sampled(parent, tid); got != want {
				t.Fatalf("%s %s: parent %v, trace %s: rule says %v, SDK %v", st.sampler, st.arg, parent.IsValid(), tid, got, want)
			}
			if want {
				yes++
			} else {
				no++
			}
		}
		t.Logf("%s %s: %d sampled, %d not", st.sampler, st.arg, yes, no)
	}
}

// An unsampled request builds nothing: no span reaches the processor, Start
// allocates nothing, and the caller's traceparent is what is propagated on.
func TestUnsampledSpanIsNotBuiltButTraceparentFlows(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp, err := NewTracerProvider(mapEnv(nil), true, sdktrace.WithSpanProcessor(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tp.Tracer("test")
	prop := propagation.TraceContext{}
	const unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
	in := http.Header{"Traceparent": {unsampled}}
	ctx := prop.Extract(context.Background(), propagation.HeaderCarrier(in))

	// Options built once, as a caller on a hot path passes them.
	serverSpan := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	allocs := testing.AllocsPerRun(100, func() {
		sctx, span := tr.Start(ctx, "quotagate.request", serverSpan...)
		if span.IsRecording() {
			span.SetAttributes(attribute.String("k", "v"))
		}
		span.End()
		if sctx != ctx {
			t.Fatal("Start changed the context of an unsampled span")
		}
	})
	if allocs != 0 {
		t.Errorf("unsampled Start+End allocated %v times, want 0", allocs)
	}
	sctx, span := tr.Start(ctx, "quotagate.request")
	span.End()
	out := http.Header{}
	prop.Inject(sctx, propagation.HeaderCarrier(out))
	if got := out.Get("traceparent"); got != unsampled {
		t.Errorf("propagated traceparent %q, want the caller's %q", got, unsampled)
	}
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("%d spans recorded for unsampled requests", n)
	}

	// A sampled caller is recorded, in the caller's trace, and what is
	// propagated names the new span as parent.
	in = http.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	sctx, span = tr.Start(prop.Extract(context.Background(), propagation.HeaderCarrier(in)), "quotagate.request")
	span.End()
	if n := len(rec.Ended()); n != 1 {
		t.Fatalf("%d spans recorded for a sampled request, want 1", n)
	}
	out = http.Header{}
	prop.Inject(sctx, propagation.HeaderCarrier(out))
	want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + span.SpanContext().SpanID().String() + "-01"
	if got := out.Get("traceparent"); got != want {
		t.Errorf("propagated traceparent %q, want %q", got, want)
	}
}

// With always_off and no caller context nothing is built and nothing is
// propagated; with nothing exported, a sampled span has ids but no record.
func TestTracerProviderRootsAndUnexported(t *testing.T) {
	off, err := NewTracerProvider(mapEnv(map[string]string{envSampler: "always_off"}), true)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		_, span := off.Tracer("t").Start(ctx, "x")
		span.End()
	})
	sctx, span := off.Tracer("t").Start(ctx, "x")
	if allocs != 0 || span.SpanContext().IsValid() || sctx != ctx {
		t.Errorf("always_off root: %v allocs, span context valid %v", allocs, span.SpanContext().IsValid())
	}

	on, err := NewTracerProvider(mapEnv(nil), false)
	if err != nil {
		t.Fatal(err)
	}
	sctx, span = on.Tracer("t").Start(ctx, "x")
	sc := span.SpanContext()
	if !sc.IsValid() || !sc.IsSampled() || span.IsRecording() || !trace.SpanContextFromContext(sctx).Equal(sc) {
		t.Errorf("unexported root: valid %v sampled %v recording %v", sc.IsValid(), sc.IsSampled(), span.IsRecording())
	}
	// A child keeps the trace and gets a span id of its own.
	_, child := on.Tracer("t").Start(sctx, "y")
	if child.SpanContext().TraceID() != sc.TraceID() || child.SpanContext().SpanID() == sc.SpanID() {
		t.Errorf("child %v of %v", child.SpanContext(), sc)
	}

	// A ratio root recorded by the SDK carries the trace id it was decided on.
	rec := tracetest.NewSpanRecorder()
	half, err := NewTracerProvider(mapEnv(map[string]string{envSampler: "traceidratio", envSamplerArg: "0.5"}), true,
		sdktrace.WithSpanProcessor(rec))
	if err != nil {
		t.Fatal(err)
	}
	_, rule, _ := samplerFromEnv(mapEnv(map[string]string{envSampler: "traceidratio", envSamplerArg: "0.5"}))
	n := 0
	for i := 0; i < 400; i++ {
		_, span := half.Tracer("t").Start(ctx, "x")
		if span.IsRecording() {
			n++
			if !rule.sampled(trace.SpanContext{}, span.SpanContext().TraceID()) {
				t.Fatalf("recorded trace %s is outside the ratio", span.SpanContext().TraceID())
			}
		}
		span.End()
	}
	if n < 120 || n > 280 || len(rec.Ended()) != n {
		t.Errorf("ratio 0.5: %d of 400 sampled, %d recorded", n, len(rec.Ended()))
	}
}

// Exemplars would name traces: they are kept off when no trace is exported,
// unless the SDK's own variable asks for them.
func TestExemplarsOffWithoutExportedTraces(t *testing.T) {
	for _, tc := range []struct {
		env      map[string]string
		exported bool
		off      bool
	}{
		{nil, false, true},
		{nil, true, false},
		{map[string]string{envExemplarFilter: "trace_based"}, false, false},
		{map[string]string{envExemplarFilter: "always_on"}, true, false},
	} {
		if got := exemplarsOff(mapEnv(tc.env), tc.exported); got != tc.off {
			t.Errorf("env %v exported %v: exemplars off %v, want %v", tc.env, tc.exported, got, tc.off)
		}
	}
}
