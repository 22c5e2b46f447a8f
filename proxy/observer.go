package proxy

import "net/http"

// An Observer is what a handler asks and tells its caller about each
// request it forwards (the gateway is one). The handler calls its methods
// on the request's own goroutine, in the order of the exchange, except
// Watch, which the transport may ask from another. in is the inbound
// request, out the outbound one: it carries the inbound request's context
// (with its values) and headers less the removed ones, and its URL points
// at the upstream. NopObserver is the observer that asks and tells
// nothing; embed it to implement only some methods.
type Observer interface {
	// Outbound runs last in the rewrite of every outbound request: after
	// the hop-by-hop headers (and every header the caller listed in
	// Connection) were removed and X-Forwarded-* were set. It may add,
	// replace and delete headers of out; it must not read its body.
	Outbound(out *http.Request)
	// Upgrade reports whether in may upgrade its connection. It is asked
	// only about WebSocket handshakes (a GET over HTTP/1.1 asking to
	// upgrade to "websocket"); every other upgrade is never forwarded.
	Upgrade(in *http.Request) bool
	// Tier returns in's tier, for the Shedder's priority.
	Tier(in *http.Request) string
	// Shed is told once of each request the Shedder refuses, before
	// Error.
	Shed(in *http.Request, tier string)
	// Response is shown every upstream response the handler is about to
	// forward, before its headers are written, except a 101 Switching
	// Protocols (an upgraded connection carries no usage). It may replace
	// resp.Body with a reader that passes the same bytes (usage.Watch
	// does), and change resp.Header. resp.Request is the outbound request.
	// It is not called when the exchange fails before a response (see
	// Failure), nor for a 101 the proxy refuses.
	Response(resp *http.Response)
	// Watch selects the requests whose failures report written (see
	// Failure): finding it out costs a net/http/httptrace.ClientTrace, a
	// few small allocations per request (fewer when the upstream has a
	// Timeout, whose exchange they share), which requests whose failures
	// are all handled alike need not pay. It is asked once per request,
	// with the outbound request.
	Watch(out *http.Request) bool
	// Failure is called once, before Error, when the proxy answers itself
	// because the upstream did not serve the request: status is 502
	// (unavailable, or a refused 101), 504 (timed out before the response
	// headers), or 503 (the Breaker is open or the Shedder refused).
	// Nothing of an upstream response has then reached the client. It is
	// not called for 499 or 413, where the caller broke the exchange off
	// and the upstream may have received the request. r is the outbound
	// request for 502 and 504 and the inbound one for 503.
	//
	// written reports whether an attempt wrote the whole request (line,
	// headers and body) to the upstream, which may then have acted on it
	// however the exchange ended: a connection the upstream reset or
	// closed after reading the request, a malformed response, a refused
	// 101, a timeout while it worked. It is false when no attempt wrote
	// it all (a refused connection, DNS, TLS, an upstream that hung up
	// mid-body, a 503), and for a request Watch did not select. A request
	// with "Expect: 100-continue" counts as written once its headers are,
	// even when the upstream fails before asking for the body: an
	// upstream may act on the headers alone, and the body is the
	// caller's to hold back.
	Failure(r *http.Request, status int, written bool)
	// Error writes the response for a failed exchange. The proxy calls it
	// exactly once per failure, before anything of the response has been
	// written, with
	//   - 502 "upstream_unavailable": refused, reset, DNS failure,
	//     malformed response, ...;
	//   - 504 "upstream_timeout": Upstream.Timeout passed, or a network
	//     timeout, before the response headers arrived;
	//   - 503 "upstream_unavailable" (breaker) or "overloaded" (shedder),
	//     with Retry-After set;
	//   - 499 "client_closed_request": the client went away, or its
	//     request body broke off mid-upload; what it writes most likely
	//     reaches no one, so it should mainly record the status;
	//   - 413 "payload_too_large": reading the request body failed with
	//     an *http.MaxBytesError (a limit such as http.MaxBytesReader's);
	//     the upstream got the request cut off mid-body.
	// message is safe to show to clients.
	Error(w http.ResponseWriter, r *http.Request, status int, code, message string)
}

// NopObserver is the Observer that changes no header, permits no upgrade,
// gives every request the tier "", watches no write, ignores responses,
// sheds and failures, and writes errors as plain text (a bare status for
// 499).
type NopObserver struct{}

// Outbound does nothing.
func (NopObserver) Outbound(*http.Request) {}

// Upgrade permits none.
func (NopObserver) Upgrade(*http.Request) bool { return false }

// Tier is "".
func (NopObserver) Tier(*http.Request) string { return "" }

// Shed does nothing.
func (NopObserver) Shed(*http.Request, string) {}

// Response does nothing.
func (NopObserver) Response(*http.Response) {}

// Watch selects none.
func (NopObserver) Watch(*http.Request) bool { return false }

// Failure does nothing.
func (NopObserver) Failure(*http.Request, int, bool) {}

// Error writes message as plain text, or only the status for 499.
func (NopObserver) Error(w http.ResponseWriter, r *http.Request, status int, code, message string) {
	writePlainError(w, r, status, code, message)
}
