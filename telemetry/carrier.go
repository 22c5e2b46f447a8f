package telemetry

import (
	"net/http"

	"go.opentelemetry.io/otel/propagation"
)

// HeaderCarrier is propagation.HeaderCarrier without the allocation per
// lookup: propagators name their headers in lowercase ("traceparent"),
// which http.Header.Get and Set turn into a new canonical string on every
// call. The W3C trace-context and baggage names are mapped to their
// canonical form by a switch; any other name goes through Header.Get and
// Set as before. Set replaces every value under the name, like Header.Set.
type HeaderCarrier http.Header

var _ propagation.TextMapCarrier = HeaderCarrier(nil)

// canonicalPropagationKey returns the canonical spelling of the header
// names the W3C propagators use, and false for any other name.
func canonicalPropagationKey(key string) (string, bool) {
	switch key {
	case "traceparent":
		return "Traceparent", true
	case "tracestate":
		return "Tracestate", true
	case "baggage":
		return "Baggage", true
	}
	return "", false
}

// Get returns the first value under key (case-insensitive), or "".
func (c HeaderCarrier) Get(key string) string {
	if k, ok := canonicalPropagationKey(key); ok {
		if v := c[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	return http.Header(c).Get(key)
}

// Set makes value the only value under key (case-insensitive).
func (c HeaderCarrier) Set(key, value string) {
	if k, ok := canonicalPropagationKey(key); ok {
		c[k] = []string{value}
		return
	}
	http.Header(c).Set(key, value)
}

// Keys lists the header names present, in canonical form.
func (c HeaderCarrier) Keys() []string { return propagation.HeaderCarrier(c).Keys() }
