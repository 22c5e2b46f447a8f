// Package proxy forwards requests to upstreams. It never decides whether a
// request may pass: the gateway has done that before it calls the handler.
//
// Each upstream gets a handler that forwards every request with one
// implementation (see forward.go), over one http.RoundTripper (the
// shared Transport; see NewTransport). It
//
//   - points the request at the upstream (httputil.ProxyRequest.SetURL:
//     the upstream URL's path is prepended, queries are joined, and the
//     Host header becomes the upstream's; the inbound host travels in
//     X-Forwarded-Host); an inbound query with a ';' or a malformed
//     percent escape is forwarded re-encoded from the parameters
//     url.ParseQuery accepts (see forwardedQuery);
//   - sets X-Forwarded-For to the inbound value (which the gateway must
//     already have deleted when the peer is not a trusted proxy) followed by
//     the peer's address, and X-Forwarded-Host and X-Forwarded-Proto to the
//     inbound Host and scheme (inbound values of these two are replaced);
//   - drops hop-by-hop headers (Connection, Keep-Alive, Proxy-Authorization,
//     TE, Upgrade, HTTP2-Settings, ...) and the caller's credentials that
//     the gateway consumes (Authorization, X-API-Key); keeps everything else,
//     including X-Request-ID, X-Quotagate-Tenant, traceparent, tracestate
//     and Cookie;
//   - then calls Observer.Outbound, which has the last word on the
//     outbound headers: nothing the caller lists in Connection can remove
//     what it sets;
//   - forwards no upgrade but a WebSocket handshake that
//     Observer.Upgrade permits, and answers 502 to a 101 for any other
//     request (see upgrade.go);
//   - streams bodies in both directions, never buffering a whole body; a
//     response of unknown length or of type text/event-stream is flushed to
//     the client after every write; a response's trailers pass, announced
//     or not; a request's are announced to the upstream by the names the
//     client declared (less those Observer.Outbound drops from
//     out.Trailer), without their values;
//   - forwards informational (1xx) responses as they arrive, with the
//     headers the caller set before forwarding, which stay for the final
//     response while the 1xx's own do not;
//   - shows every response it forwards but a 101 to
//     Observer.Response before writing it, so that the gateway can
//     read the usage it reports as the body passes (package usage);
//   - sends every failure before the response headers through one error
//     funnel (see Observer.Error), which also tells Observer.Failure
//     when the upstream did not serve the request, and whether it had
//     received the whole request all the same.
//
// A failure after the response headers (the upstream drops the connection
// mid-body, the client stops reading) cannot become an error status. The
// handler then aborts the response with panic(http.ErrAbortHandler), as
// httputil.ReverseProxy does: net/http recovers it quietly and closes the
// connection, so the client sees a broken response rather than a short one
// that looks complete (called without a server, it logs the failure
// instead). Middleware that recovers panics must let http.ErrAbortHandler
// through. No other failure panics.
//
// An upstream URL with the scheme "echo" ("echo:") is served by a built-in
// handler without any network; see New.
package proxy

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

// Upstream is where one route's requests go.
type Upstream struct {
	// Name identifies the upstream in logs.
	Name string
	// URL is the upstream's base URL: scheme http or https with a host, and
	// optionally a base path and query; or scheme "echo" for the built-in
	// demo handler.
	URL *url.URL
	// Timeout bounds the exchange from sending the request until the
	// response headers arrive: connecting, sending the request (including
	// its body) and waiting. A response body may take longer, so streaming
	// responses are not cut off. 0 means no timeout.
	Timeout time.Duration
}

// Options configures the handlers New builds. The zero value is usable.
type Options struct {
	// Transport sends requests to upstreams. nil means a new
	// NewTransport(TransportOptions{}) per handler; pass one Transport to
	// every handler so that all upstreams share one tuned connection pool.
	// A RoundTripper that wraps a Transport (a tracing one) should
	// implement LimitedTransport by passing it on, so that direct
	// exchanges keep their limits themselves.
	Transport http.RoundTripper
	// Observer is the caller's side of every request the handler
	// forwards: it sets the outbound headers last, permits upgrades, gives
	// the tier the shedder ranks by, sees each response before it is
	// written, is told of failures, and writes the error answers. nil is
	// NopObserver{}.
	Observer Observer
	// Logger receives one record per failure (Warn for 502 and 504, Info for
	// 499 and 413), and one per response body that broke off (Warn) or
	// upgrade whose 101 could not be written to the client (Info). nil
	// discards them.
	Logger *slog.Logger
	// BufferPool provides the buffers that copy response bodies. nil means
	// a shared sync.Pool of 32 KiB buffers.
	BufferPool httputil.BufferPool
	// Breaker, when not nil, is the upstream's circuit breaker: while it is
	// open the handler answers through Observer.Error with 503
	// CodeUnavailable and a Retry-After header, without contacting the
	// upstream (r is then the inbound request). See Breaker.
	Breaker *Breaker
	// Shedder, when not nil, bounds the requests in flight to the upstream
	// and refuses the lowest tiers first when it saturates: through
	// Observer.Error with 503 CodeOverloaded and a Retry-After header (r
	// is then the inbound request), after Observer.Shed. See Shedder. A
	// request the breaker refuses never counts against it.
	Shedder *Shedder
}

// Error codes passed to Observer.Error.
const (
	CodeUnavailable  = "upstream_unavailable"
	CodeTimeout      = "upstream_timeout"
	CodeClientClosed = "client_closed_request"
	CodeTooLarge     = "payload_too_large"
)

// StatusClientClosedRequest is the status recorded when the client went
// away before the upstream answered (the value nginx uses).
const StatusClientClosedRequest = 499

// New returns the handler that forwards requests to up. It returns an error
// when up is invalid (no URL, a scheme other than http, https or echo, no
// host, credentials in the URL, a negative timeout).
//
// For the scheme "echo", New returns a handler that answers every request
// itself with 200 and a JSON object {"method", "path", "request_id",
// "tenant"} taken from the request (the last two from the X-Request-ID and
// X-Quotagate-Tenant headers). It needs no network, so a configuration can
// be tried with nothing behind it. Options and Upstream.Timeout do not
// apply to it.
func New(up Upstream, o Options) (http.Handler, error) {
	return newHandler(up, o, stdAfterFunc)
}

// afterFunc runs f after d unless the returned timer is stopped first; its
// Stop reports whether it prevented f from running, like time.Timer.Stop.
type afterFunc func(d time.Duration, f func()) stopper

// stopper is a timer that can be stopped (*time.Timer is one).
type stopper interface{ Stop() bool }

func stdAfterFunc(d time.Duration, f func()) stopper {
	return time.AfterFunc(d, f)
}

func newHandler(up Upstream, o Options, after afterFunc) (http.Handler, error) {
	if err := validate(up); err != nil {
		return nil, err
	}
	if up.URL.Scheme == "echo" {
		return echoHandler{}, nil
	}
	if o.Transport == nil {
		o.Transport = NewTransport(TransportOptions{})
	}
	obs := o.Observer
	if obs == nil {
		obs = NopObserver{}
	}
	var transport http.RoundTripper = newExchanges(o.Transport, up.Timeout, after, obs.Watch)
	if o.Breaker != nil || o.Shedder != nil {
		transport = &outcomeTransport{next: transport}
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	pool := o.BufferPool
	if pool == nil {
		pool = defaultBufferPool
	}
	funnel := &errorFunnel{upstream: up.Name, log: logger, write: obs.Error, onFailure: obs.Failure}
	target := *up.URL
	fw := &forwarder{transport: transport, target: &target, obs: obs, funnel: funnel, pool: pool,
		log: logger.With("upstream", up.Name)}
	var h http.Handler = fw
	if o.Shedder != nil {
		h = &shedHandler{s: o.Shedder, next: h, tier: obs.Tier, onShed: obs.Shed, write: funnel.fail}
	}
	if o.Breaker != nil {
		h = &breakerHandler{b: o.Breaker, next: h, write: funnel.fail}
	}
	return h, nil
}

// errStatusBelow100 is the cause of a 502 for an upstream response whose
// status line carries a code below 100: http.ReadResponse takes any three
// digits, but no such status can be written to the client
// (ResponseWriter.WriteHeader panics).
var errStatusBelow100 = errors.New("the upstream answered with a status code below 100")

func validate(up Upstream) error {
	u := up.URL
	switch {
	case u == nil:
		return fmt.Errorf("proxy: upstream %q: no URL", up.Name)
	case up.Timeout < 0:
		return fmt.Errorf("proxy: upstream %q: negative timeout %v", up.Name, up.Timeout)
	case u.Scheme == "echo":
		return nil
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("proxy: upstream %q: scheme %q: want http, https or echo", up.Name, u.Scheme)
	case u.Host == "" || u.Opaque != "":
		return fmt.Errorf("proxy: upstream %q: URL %q has no host", up.Name, u.Redacted())
	case u.User != nil:
		return fmt.Errorf("proxy: upstream %q: credentials in the URL are not supported", up.Name)
	}
	return nil
}
