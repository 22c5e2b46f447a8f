package gateway

import (
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/quotagate/quotagate/proxy"
	"github.com/quotagate/quotagate/telemetry"
)

// tracingTransport gives every upstream call a client span and carries the
// trace context to the upstream (the caller's trace id, our span as parent).
// Unlike generic HTTP instrumentation it records only bounded values: the
// route name, the method, the upstream's host and the status — never the URL,
// whose path and query may hold identifiers.
//
// When the request span records nothing (not sampled, or sampled with
// nothing exporting spans), neither would the client span: no span is
// started and no attribute built, and the request's trace context, when it
// has one, is what the upstream receives (an unsampled caller's own
// traceparent, unchanged).
type tracingTransport struct {
	next       http.RoundTripper
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
}

var _ proxy.LimitedTransport = (*tracingTransport)(nil)

// RoundTripLimited lets the transport under it keep the exchange's limits
// (see proxy.LimitedTransport) for a request that records no span; a
// recorded one takes RoundTrip, so that its span covers the whole exchange.
func (t *tracingTransport) RoundTripLimited(r *http.Request, l proxy.Limits) (*http.Response, bool, error) {
	lt, ok := t.next.(proxy.LimitedTransport)
	if !ok || trace.SpanFromContext(r.Context()).IsRecording() {
		return nil, false, nil
	}
	if trace.SpanContextFromContext(r.Context()).IsValid() {
		t.propagator.Inject(r.Context(), telemetry.HeaderCarrier(r.Header))
	}
	return lt.RoundTripLimited(r, l)
}

func (t *tracingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if !trace.SpanFromContext(r.Context()).IsRecording() {
		if trace.SpanContextFromContext(r.Context()).IsValid() {
			t.propagator.Inject(r.Context(), telemetry.HeaderCarrier(r.Header))
		}
		return t.next.RoundTrip(r)
	}
	routeName := ""
	if st := stateFrom(r.Context()); st != nil && st.route != nil {
		routeName = st.route.name
	}
	ctx, span := t.tracer.Start(r.Context(), "quotagate.upstream", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			telemetry.AttrRoute.String(routeName),
			attribute.String("http.request.method", r.Method),
			attribute.String("server.address", r.URL.Host)))
	defer span.End()
	r = r.WithContext(ctx)
	t.propagator.Inject(ctx, telemetry.HeaderCarrier(r.Header))
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "upstream request failed")
		return nil, err
	}
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	if resp.StatusCode >= 500 {
		span.SetStatus(codes.Error, http.StatusText(resp.StatusCode))
	}
	return resp, nil
}
