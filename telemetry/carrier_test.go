package telemetry

import (
	"context"
	"net/http"
	"reflect"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The carrier reads and writes what propagation.HeaderCarrier does, for
// the W3C names and any other.
func TestHeaderCarrierMatchesHeaderCarrier(t *testing.T) {
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	in := http.Header{
		"Traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "ignored"},
		"Tracestate":  {"vendor=1"},
		"Baggage":     {"k=v"},
	}
	got := prop.Extract(context.Background(), HeaderCarrier(in))
	want := prop.Extract(context.Background(), propagation.HeaderCarrier(in))
	if g, w := trace.SpanContextFromContext(got), trace.SpanContextFromContext(want); !g.Equal(w) || !g.IsValid() {
		t.Errorf("extracted %v, want %v", g, w)
	}
	if g, w := baggage.FromContext(got).String(), baggage.FromContext(want).String(); g != w || g == "" {
		t.Errorf("baggage %q, want %q", g, w)
	}
	outGot, outWant := http.Header{"Traceparent": {"old", "older"}}, http.Header{"Traceparent": {"old", "older"}}
	prop.Inject(got, HeaderCarrier(outGot))
	prop.Inject(want, propagation.HeaderCarrier(outWant))
	if !reflect.DeepEqual(outGot, outWant) {
		t.Errorf("injected %q, want %q", outGot, outWant)
	}
	c := HeaderCarrier(http.Header{})
	c.Set("x-b3-traceid", "abc")
	c.Set("TRACEPARENT", "x") // not the propagators' spelling: canonicalized by Header.Set
	if c.Get("X-B3-TraceId") != "abc" || c.Get("traceparent") != "x" || c.Get("tracestate") != "" {
		t.Errorf("other names: %q", http.Header(c))
	}
	if keys := c.Keys(); len(keys) != 2 {
		t.Errorf("Keys() = %q", keys)
	}
}

// Looking for a trace context a request does not carry, the common case,
// allocates nothing.
func TestHeaderCarrierExtractAllocs(t *testing.T) {
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	h := HeaderCarrier(http.Header{"Accept": {"*/*"}})
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() { prop.Extract(ctx, h) }); n != 0 {
		t.Errorf("%v allocations per Extract, want 0", n)
	}
}
