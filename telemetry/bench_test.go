package telemetry

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

func BenchmarkMetricsDecision(b *testing.B) {
	p, err := Setup(context.Background(), Options{Getenv: mapEnv(nil), InstanceID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	m, err := NewMetrics(p.MeterProvider)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m.Decision(ctx, "transfers", "global", ResultAllowed)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				m.Decision(ctx, "transfers", "global", ResultAllowed)
			}
		})
	})
	b.Run("series", func(b *testing.B) {
		s := m.DecisionSeries("transfers", "global", ResultAllowed)
		b.ReportAllocs()
		for b.Loop() {
			m.CountDecision(s)
		}
	})
	// Baselines: a synchronous SDK counter, as the decisions were counted
	// before they were kept in cells of their own, with the attribute set
	// built per call and with one prebuilt option passed directly.
	syncCounter, err := m.meter.Int64Counter("quotagate.bench.sync")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("baseline_attrs_per_call", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			syncCounter.Add(ctx, 1, metric.WithAttributes(
				labelPolicy.String("transfers"), labelStage.String("global"), labelResult.String(ResultAllowed)))
		}
	})
	b.Run("baseline_prebuilt", func(b *testing.B) {
		opts := addOptions(attribute.NewSet(labelPolicy.String("transfers"),
			labelStage.String("global"), labelResult.String(ResultAllowed)))
		b.ReportAllocs()
		for b.Loop() {
			syncCounter.Add(ctx, 1, opts...)
		}
	})
	b.Run("duration", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m.DecisionDuration(ctx, "global", 300*time.Microsecond)
		}
	})
	b.Run("request", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m.Request(ctx, "transfers", 200)
		}
	})
	b.Run("duration_series", func(b *testing.B) {
		s := m.StageSeries("global")
		b.ReportAllocs()
		for b.Loop() {
			m.RecordDecisionDuration(ctx, s, 300*time.Microsecond)
		}
	})
	// Baseline: a synchronous SDK histogram with one prebuilt option, as the
	// durations were recorded before they were kept in cells of their own.
	syncHistogram, err := m.meter.Float64Histogram("quotagate.bench.sync.duration",
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(latencyBuckets...))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("baseline_histogram_prebuilt", func(b *testing.B) {
		opt := metric.WithAttributeSet(attribute.NewSet(labelStage.String("global")))
		b.ReportAllocs()
		for b.Loop() {
			syncHistogram.Record(ctx, 300e-6, opt)
		}
	})
	// Under a sampled span, as on a traced request: with exemplars on (the
	// SDK's default, kept when traces are exported) each measurement of a
	// histogram becomes its bucket's exemplar; off (Setup without exported
	// traces), the span is not even looked at. Counters take none either way.
	sampled := trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled}))
	for _, mode := range []exemplarMode{exemplarsNone, exemplarsTraceBased} {
		name := "sampled_span/exemplars_on"
		if mode == exemplarsNone {
			name = "sampled_span/exemplars_off"
		}
		b.Run(name, func(b *testing.B) {
			m.exemplars.Store(int32(mode))
			defer m.exemplars.Store(int32(exemplarsNone))
			b.ReportAllocs()
			for b.Loop() {
				m.DecisionDuration(sampled, "global", 300*time.Microsecond)
			}
		})
	}
}

// BenchmarkSpan starts and ends one span with two attributes, as a stage
// does, with no exporter attached.
func BenchmarkSpan(b *testing.B) {
	for _, tc := range []struct {
		name    string
		sampler sdktrace.Sampler
	}{
		{"always_off", sdktrace.NeverSample()},
		{"always_on", sdktrace.AlwaysSample()},
	} {
		b.Run(tc.name, func(b *testing.B) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(tc.sampler))
			defer func() { _ = tp.Shutdown(context.Background()) }()
			tr := tp.Tracer(InstrumentationName)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_, span := tr.Start(ctx, "ratelimit.global")
				if span.IsRecording() {
					span.SetAttributes(AttrPolicy.String("transfers"), AttrDecision.String(ResultAllowed))
				}
				span.End()
			}
		})
	}
}

func BenchmarkLogLimiterAllow(b *testing.B) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	l := NewLogLimiter(10, time.Second, func() time.Time { return t0 })
	b.ReportAllocs()
	for b.Loop() {
		l.Allow("store_error")
	}
}

func BenchmarkLoggerWithSpan(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ctx, span := tp.Tracer("b").Start(context.Background(), "req")
	defer span.End()
	log := NewLogger(io.Discard, slog.LevelInfo)
	b.ReportAllocs()
	for b.Loop() {
		log.InfoContext(ctx, "decision", "policy", "transfers")
	}
}
