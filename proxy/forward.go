package proxy

import (
	"context"
	"io"
	"log"
	"maps"
	"mime"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strings"
	"sync"

	"golang.org/x/net/http/httpguts"
)

// The handler's own forwarding. httputil.ReverseProxy builds each
// outbound request by cloning the inbound one and deleting headers one
// name at a time (each Del canonicalizes its name), and copies the
// response headers one value at a time; for a small request that is much
// of what forwarding costs. The requests a direct exchange serves (no
// body, no upgrade, an http upstream) are forwarded by forwarder instead,
// with the same result on the wire and for every hook: the outbound
// request is built in one pass over the inbound headers, in one
// allocation with its URL and what the exchange needs, and the response
// headers are copied a name at a time. It still goes through the
// handler's transport (the exchange's timeout, the write watch, the
// breaker's and the shedder's outcomes, and the transport it was given,
// such as a tracing one), and fails through the same error funnel. Every
// other request goes to the ReverseProxy.

// A DirectTransport sends some requests as direct exchanges (see
// Transport). A handler whose Options.Transport is one forwards the
// requests the transport would send so without httputil.ReverseProxy,
// still through the transport's RoundTrip (or RoundTripLimited). A
// RoundTripper that wraps a Transport and passes every request on to it
// implements DirectTransport by asking the Transport.
type DirectTransport interface {
	http.RoundTripper
	// DirectExchanges reports whether the transport sends a request
	// without a body to an http URL (any method but CONNECT, not asking
	// to upgrade, to close the connection or for 100 Continue) as a
	// direct exchange.
	DirectExchanges() bool
}

// forwarder is the handler of an http or https upstream.
type forwarder struct {
	rp *httputil.ReverseProxy
	// direct is the transport the handler was given when it is a
	// DirectTransport and the upstream's scheme is http; nil otherwise
	// (every request then goes to rp).
	direct DirectTransport
	// transport is rp's transport: the exchanges (and outcomes) over the
	// transport the handler was given.
	transport  http.RoundTripper
	target     *url.URL
	setHeaders func(out *http.Request)
	modify     func(*http.Response) error // rp's ModifyResponse
	funnel     *errorFunnel
	pool       httputil.BufferPool
	errorLog   *log.Logger // rp's ErrorLog
}

func (f *forwarder) ServeHTTP(w http.ResponseWriter, in *http.Request) {
	if !f.owns(w, in) {
		f.rp.ServeHTTP(keepOwnHeaders(w, in), in)
		return
	}
	f.forward(w, in)
}

// owns reports whether f forwards in itself: whether the outbound request
// the ReverseProxy would build for it is one the transport sends as a
// direct exchange, and the ReverseProxy would do nothing for it that
// forward does not (watch a CloseNotifier, re-encode the query).
func (f *forwarder) owns(w http.ResponseWriter, in *http.Request) bool {
	if f.direct == nil || in.ContentLength != 0 || in.Method == http.MethodConnect || in.URL == nil ||
		len(in.TransferEncoding) != 0 || len(in.Trailer) != 0 || in.Header["Expect"] != nil ||
		httpguts.HeaderValuesContainsToken(in.Header["Connection"], "Upgrade") ||
		!cleanQuery(in.URL.RawQuery) || !f.direct.DirectExchanges() {
		return false
	}
	if in.Context().Done() == nil {
		// The ReverseProxy would watch the writer's CloseNotify instead.
		//lint:ignore SA1019 the ReverseProxy still honours it
		if _, ok := w.(http.CloseNotifier); ok {
			return false
		}
	}
	return true
}

// cleanQuery reports whether the ReverseProxy leaves the query q as it is:
// it re-encodes one with a ';', a malformed escape or more than 10,000
// parameters, and every query when GODEBUG sets urlmaxqueryparams (see
// reencodesEveryQuery).
func cleanQuery(q string) bool {
	if q == "" {
		return true
	}
	params := 1
	for i := 0; i < len(q); {
		switch q[i] {
		case ';':
			return false
		case '%':
			if i+2 >= len(q) || !isHex(q[i+1]) || !isHex(q[i+2]) {
				return false
			}
			i += 3
			continue
		case '&':
			params++
		}
		i++
	}
	return params <= 10000 && !reencodesEveryQuery()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// reencodesEveryQuery reports whether the ReverseProxy re-encodes every
// query, which it does when GODEBUG sets urlmaxqueryparams: it asks a
// ReverseProxy once.
var reencodesEveryQuery = sync.OnceValue(func() bool {
	const q = "b=1&a=2" // re-encoding sorts it
	var got string
	rp := &httputil.ReverseProxy{
		Rewrite:      func(pr *httputil.ProxyRequest) { got = pr.Out.URL.RawQuery },
		Transport:    failingTransport{},
		ErrorHandler: func(http.ResponseWriter, *http.Request, error) {},
	}
	req, err := http.NewRequest(http.MethodGet, "http://probe.invalid/?"+q, nil)
	if err != nil {
		return true
	}
	rp.ServeHTTP(discardWriter{}, req)
	return got != q
})

// failingTransport fails every round trip.
type failingTransport struct{}

func (failingTransport) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errUnaskedSwitch // any error; the probe's handler drops it
}

// discardWriter is a ResponseWriter that keeps nothing.
type discardWriter struct{}

func (discardWriter) Header() http.Header         { return http.Header{} }
func (discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (discardWriter) WriteHeader(int)             {}

// outbound is the outbound request of a forward with what it needs, in
// one allocation.
type outbound struct {
	req   http.Request
	url   url.URL
	trace httptrace.ClientTrace
	xfwd  [3]string // the X-Forwarded-* values
	te    [1]string // the value of Te when set here
	ua    [1]string // the value of User-Agent when set here
	// w and done are the 1xx writer's (see got1xx): done is set once the
	// round trip returned, after which w's headers are no longer touched.
	w    http.ResponseWriter
	mu   sync.Mutex
	done bool
}

// forward forwards in, which f owns, as the ReverseProxy would.
func (f *forwarder) forward(w http.ResponseWriter, in *http.Request) {
	o := &outbound{w: w}
	o.trace.Got1xxResponse = o.got1xx
	// The ReverseProxy adds the trace to the context after the rewrite;
	// Observer.Outbound here gets a context with the trace, whose values are
	// otherwise the inbound request's.
	ctx := httptrace.WithClientTrace(in.Context(), &o.trace)
	o.req = *in.WithContext(ctx)
	out := &o.req
	o.url = *in.URL
	out.URL = &o.url
	out.Body = nil
	out.Close = false
	out.Header = outboundHeader(in.Header)
	if httpguts.HeaderValuesContainsToken(in.Header["Te"], "trailers") {
		o.te[0] = "trailers"
		out.Header["Te"] = o.te[:1:1]
	}
	pr := httputil.ProxyRequest{In: in, Out: out}
	pr.SetURL(f.target)
	setXForwardedIn(out.Header, in, &o.xfwd)
	if f.setHeaders != nil {
		f.setHeaders(out)
	}
	if _, ok := out.Header["User-Agent"]; !ok {
		// Sent empty, so that net/http adds none of its own.
		out.Header["User-Agent"] = o.ua[:1:1]
	}

	res, err := f.transport.RoundTrip(out)
	o.mu.Lock()
	o.done = true
	o.mu.Unlock()
	if err != nil {
		f.funnel.handle(w, out, err)
		return
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		// The request was not forwarded as an upgrade, so the switch is
		// refused (an upgrade Observer.Outbound added is not one either).
		if err = f.modify(res); err == nil {
			err = errUnaskedSwitch
		}
		res.Body.Close()
		f.funnel.handle(w, out, err)
		return
	}
	removeHopHeaders(res.Header)
	if err := f.modify(res); err != nil {
		res.Body.Close()
		f.funnel.handle(w, out, err)
		return
	}
	copyHeader(w.Header(), res.Header)
	announced := len(res.Trailer)
	if announced > 0 {
		names := make([]string, 0, announced)
		for k := range res.Trailer {
			names = append(names, k)
		}
		w.Header().Add("Trailer", strings.Join(names, ", "))
	}
	w.WriteHeader(res.StatusCode)
	if err := f.copyBody(w, res); err != nil {
		defer res.Body.Close()
		// As the ReverseProxy: abort the response under a server, which
		// recovers http.ErrAbortHandler quietly; elsewhere (a handler
		// called directly) only log.
		if in.Context().Value(http.ServerContextKey) == nil {
			f.errorLog.Printf("proxy: body copy failed outside a server, response not aborted: %v", err)
			return
		}
		panic(http.ErrAbortHandler)
	}
	res.Body.Close() // now, which fills res.Trailer
	if len(res.Trailer) > 0 {
		// Forces chunking, so that a short body gets no Content-Length.
		http.NewResponseController(w).Flush()
	}
	if len(res.Trailer) == announced {
		copyHeader(w.Header(), res.Trailer)
		return
	}
	for k, vv := range res.Trailer {
		k = http.TrailerPrefix + k
		for _, v := range vv {
			w.Header().Add(k, v)
		}
	}
}

// got1xx is the trace's Got1xxResponse: it forwards an informational
// response while the round trip is under way. The headers the handler's
// caller set before forwarding (the gateway's X-Request-Id and RateLimit
// headers) go out with the 1xx and stay for the final response; the
// 1xx's own headers do not.
func (o *outbound) got1xx(code int, header textproto.MIMEHeader) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done {
		return nil
	}
	h := o.w.Header()
	own := h.Clone() // rare: only responses with a 1xx pay for it
	copyHeader(h, http.Header(header))
	o.w.WriteHeader(code)
	clear(h) // WriteHeader keeps a 1xx's headers for the final response
	maps.Copy(h, own)
	return nil
}

// streams reports whether res's body is flushed to the client after
// every write, as the ReverseProxy does: a text/event-stream or a body of
// unknown length.
func streams(res *http.Response) bool {
	return res.ContentLength == -1 || isEventStream(res.Header.Get("Content-Type"))
}

// isEventStream reports whether the media type of the Content-Type ct is
// text/event-stream, as mime.ParseMediaType reads it; only a value whose
// type is that, ignoring case, is parsed.
func isEventStream(ct string) bool {
	const sse = "text/event-stream"
	base, _, _ := strings.Cut(ct, ";")
	if base = strings.TrimSpace(base); len(base) != len(sse) || !asciiEqualFold(base, sse) {
		return false
	}
	mt, _, _ := mime.ParseMediaType(ct)
	return mt == sse
}

// copyBody copies res's body to w with a buffer of the pool, flushing
// after each write (and the headers before the first) when the response
// streams. It returns the error of a write, or of a read but io.EOF.
func (f *forwarder) copyBody(w http.ResponseWriter, res *http.Response) error {
	var rc *http.ResponseController
	if streams(res) {
		rc = http.NewResponseController(w)
		rc.Flush()
	}
	buf := f.pool.Get()
	defer f.pool.Put(buf)
	if len(buf) == 0 {
		buf = make([]byte, bufferSize)
	}
	for {
		nr, rerr := res.Body.Read(buf)
		if rerr != nil && rerr != io.EOF && rerr != context.Canceled {
			f.errorLog.Printf("proxy: read error during body copy: %v", rerr)
		}
		if nr > 0 {
			nw, werr := w.Write(buf[:nr])
			if rc != nil {
				rc.Flush()
			}
			if werr != nil {
				return werr
			}
			if nw != nr {
				return io.ErrShortWrite
			}
		}
		if rerr != nil {
			if rerr == io.EOF {
				return nil
			}
			return rerr
		}
	}
}
