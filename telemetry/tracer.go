package telemetry

import (
	"context"
	"encoding/binary"
	"math/rand/v2"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// sampling is the decision rule of one OTEL_TRACES_SAMPLER value, in a form
// that can be applied before anything is built: the same decisions the SDK
// sampler of that value makes (see samplerFromEnv), read from the parent's
// span context and, for a ratio, from the trace id.
type sampling struct {
	// parentBased follows a valid parent's sampled flag.
	parentBased bool
	// bound is the root rule as a trace-id threshold: a trace is sampled
	// when the top 63 bits of its id's last 8 bytes are below it.
	// boundAll samples every trace and 0 none; anything between is a
	// ratio, and only a ratio needs the trace id.
	bound uint64
}

// boundAll is the bound of a rule that samples every trace.
const boundAll = ^uint64(0)

// ratioBound is the bound of TraceIDRatioBased(f), computed as the SDK does.
func ratioBound(f float64) uint64 {
	switch {
	case f >= 1:
		return boundAll
	case f <= 0:
		return 0
	}
	return uint64(f * (1 << 63))
}

// sampled reports the decision for a span whose parent is parent and whose
// trace id is tid (the parent's when it is valid).
func (s sampling) sampled(parent trace.SpanContext, tid trace.TraceID) bool {
	if s.parentBased && parent.IsValid() {
		return parent.IsSampled()
	}
	switch s.bound {
	case boundAll:
		return true
	case 0:
		return false
	}
	return binary.BigEndian.Uint64(tid[8:16])>>1 < s.bound
}

// needsTraceID reports whether a root decision depends on the trace id.
func (s sampling) needsTraceID() bool { return s.bound != 0 && s.bound != boundAll }

// TracerProvider is an OpenTelemetry tracer provider that applies its
// sampler before it builds a span: a span that is not sampled is never
// created, so it costs no span object, no attributes and no ids (a ratio
// sampler draws a trace id for a root, which is what it decides by). Start
// then returns its ctx unchanged with the span already in it: a caller's
// trace context extracted into ctx stays there, so it is still logged and
// still propagated to the upstream as the caller sent it.
//
// A sampled span is an SDK span when traces are exported. When nothing
// exports them it is a span context alone (a new span id, the trace id of
// the parent or a new one, sampled flag set, the parent's trace state),
// which carries ids to logs and upstreams the way a recorded span would but
// records nothing: building a span only to drop it at End is what this
// spares.
//
// Safe for concurrent use.
type TracerProvider struct {
	embedded.TracerProvider

	sdk      *sdktrace.TracerProvider
	rule     sampling
	recorded bool
}

// NewTracerProvider builds a provider that samples with the sampler that
// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (read through getenv;
// unset means parentbased_always_on) name, and that records sampled spans
// into an SDK provider built from opts when recorded is set (opts should
// then attach the span processors, and must not set a sampler or an id
// generator). An unknown sampler or a bad argument is an error.
func NewTracerProvider(getenv func(string) string, recorded bool, opts ...sdktrace.TracerProviderOption) (*TracerProvider, error) {
	sampler, rule, err := samplerFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	opts = append(opts, sdktrace.WithSampler(sampler), sdktrace.WithIDGenerator(idGenerator{}))
	return &TracerProvider{sdk: sdktrace.NewTracerProvider(opts...), rule: rule, recorded: recorded}, nil
}

// Tracer returns a tracer of the given instrumentation scope.
func (p *TracerProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return &tracer{sdk: p.sdk.Tracer(name, opts...), p: p}
}

// Shutdown flushes and stops the span processors; see
// sdktrace.TracerProvider.Shutdown.
func (p *TracerProvider) Shutdown(ctx context.Context) error { return p.sdk.Shutdown(ctx) }

type tracer struct {
	embedded.Tracer

	sdk trace.Tracer
	p   *TracerProvider
}

// Start starts a span as TracerProvider describes. Options (attributes
// among them) are looked at only for a span that is recorded, so a caller
// that builds them only when trace.SpanFromContext(ctx).IsRecording() or
// after Start loses nothing.
func (t *tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := trace.SpanContextFromContext(ctx)
	var tid trace.TraceID
	switch {
	case parent.IsValid():
		tid = parent.TraceID()
	case t.p.rule.needsTraceID() || !t.p.recorded:
		tid = newTraceID()
	}
	if !t.p.rule.sampled(parent, tid) {
		return ctx, trace.SpanFromContext(ctx)
	}
	if t.p.recorded {
		if !parent.IsValid() && tid.IsValid() {
			// The SDK's id generator takes this id, so that the SDK's
			// sampler decides on the trace id this one did.
			ctx = context.WithValue(ctx, traceIDKey{}, tid)
		}
		return t.sdk.Start(ctx, name, opts...)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    tid,
		SpanID:     newSpanID(),
		TraceFlags: trace.FlagsSampled,
		TraceState: parent.TraceState(),
	})
	ctx = trace.ContextWithSpanContext(ctx, sc)
	return ctx, trace.SpanFromContext(ctx)
}

// traceIDKey is the context key of a trace id chosen before the SDK
// starts a root span.
type traceIDKey struct{}

// idGenerator is the SDK's id generator: random ids, except that a root
// span takes the trace id its sampling was decided on.
type idGenerator struct{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if tid, ok := ctx.Value(traceIDKey{}).(trace.TraceID); ok {
		return tid, newSpanID()
	}
	return newTraceID(), newSpanID()
}

func (idGenerator) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return newSpanID() }

// newTraceID returns a random, valid (non-zero) trace id.
func newTraceID() trace.TraceID {
	var tid trace.TraceID
	for !tid.IsValid() {
		binary.NativeEndian.PutUint64(tid[:8], rand.Uint64())
		binary.NativeEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid
}

// newSpanID returns a random, valid (non-zero) span id.
func newSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.NativeEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}
