package gateway

import (
	"net/http"

	"github.com/quotagate/quotagate/telemetry"
)

// upstreamObserver is the gateway's side of the requests one upstream's
// proxy forwards (proxy.Observer). Each method finds the request's state
// in its context; gw is nil in a pipeline that serves nothing (Explain),
// whose responses and failures settle nothing.
type upstreamObserver struct {
	gw       *Gateway
	upstream string
	metrics  *telemetry.Metrics
}

// Outbound sets the gateway's own headers (ownHeaders) and drops request
// trailers under the name a route reserves from (dropReserveTrailers).
func (o upstreamObserver) Outbound(out *http.Request) { outboundHeaders(out) }

// Upgrade permits a WebSocket on a route with websocket: true.
func (o upstreamObserver) Upgrade(in *http.Request) bool {
	st := stateFrom(in.Context())
	return st != nil && st.route != nil && st.route.websocket
}

// Tier is the tier the identity stage found (callerTier).
func (o upstreamObserver) Tier(in *http.Request) string { return callerTier(in) }

// Shed counts a request the upstream's shedder refused.
func (o upstreamObserver) Shed(in *http.Request, tier string) {
	o.metrics.Shed(in.Context(), o.upstream, tier, 1)
}

// Response drops the upstream's x-ratelimit-* headers where the gateway
// reports its own (dropUpstreamSignals), and watches the usage of a
// response whose request holds a reservation (observeResponse).
func (o upstreamObserver) Response(resp *http.Response) {
	if resp.Request != nil {
		if st := stateFrom(resp.Request.Context()); openAISignals(st) {
			dropUpstreamSignals(resp.Header, &st.signals)
		}
	}
	if o.gw != nil {
		o.gw.observeResponse(resp)
	}
}

// Watch selects the requests holding a reservation (settlePending).
func (o upstreamObserver) Watch(out *http.Request) bool { return settlePending(out) }

// Failure settles the reservation of a request the upstream did not serve
// (onUpstreamFailure).
func (o upstreamObserver) Failure(r *http.Request, status int, written bool) {
	if o.gw != nil {
		o.gw.onUpstreamFailure(r, status, written)
	}
}

// Error answers a failed exchange as problem+json (writeProxyError).
func (o upstreamObserver) Error(w http.ResponseWriter, r *http.Request, status int, code, message string) {
	writeProxyError(w, r, status, code, message)
}
