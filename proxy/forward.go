package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
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

// The forwarder is the one implementation of "send this request upstream
// and stream the answer back", for every request of an http or https
// upstream: bodies, upgrades and informational responses included. It
// does what httputil.ReverseProxy does with the hooks the package
// documents (see the package comment), in fewer steps: the outbound
// request is built in one pass over the inbound headers, in one
// allocation with its URL and trace, and the response headers are
// copied a name at a time (see forward_headers.go). ReverseProxy clones
// the request and deletes headers one name at a time, each Del
// canonicalizing its name; on BenchmarkProxySmall that and net/http's
// goroutine hand-offs (see direct.go) took 74–79 µs and 97 allocations
// per request against 42–46 µs and 67 (BENCHMARKS.md, "One forwarder").
// httputil.ReverseProxy stays in the tests only, as the oracle the
// forwarder is held to (differential_test.go).

// forwarder is the handler of an http or https upstream.
type forwarder struct {
	// transport is the exchanges (and outcomes) over the transport the
	// handler was given.
	transport http.RoundTripper
	target    *url.URL
	obs       Observer
	funnel    *errorFunnel
	pool      httputil.BufferPool
	log       *slog.Logger
}

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

func (f *forwarder) ServeHTTP(w http.ResponseWriter, in *http.Request) {
	o := &outbound{w: w}
	o.trace.Got1xxResponse = o.got1xx
	// Observer.Outbound gets a context with the trace, whose values are
	// otherwise the inbound request's.
	ctx := httptrace.WithClientTrace(in.Context(), &o.trace)
	o.req = *in.WithContext(ctx)
	out := &o.req
	if in.URL != nil {
		o.url = *in.URL
	}
	o.url.RawQuery = forwardedQuery(o.url.RawQuery)
	out.URL = &o.url
	out.Body = sizeBody(in.Body, in.ContentLength)
	if out.Body != nil {
		// The transport may read the body after the handler returned
		// (a late check for more bytes, a goroutine of net/http's), which
		// the server forbids: it is closed here first.
		defer out.Body.Close()
	}
	out.Close = false
	// The trailer names the client announced, as they are now: the
	// Observer may drop some, and the server's later filling of in's map
	// (at the body's end) does not reach the upstream.
	out.Trailer = in.Trailer.Clone()
	out.Header = outboundHeader(in.Header)
	if httpguts.HeaderValuesContainsToken(in.Header["Te"], "trailers") {
		o.te[0] = "trailers"
		out.Header["Te"] = o.te[:1:1]
	}
	upgrade := upgradeType(in.Header)
	if upgrade != "" && upgradeAllowed(in, upgrade, f.obs.Upgrade) {
		out.Header["Connection"], out.Header["Upgrade"] = []string{"Upgrade"}, []string{upgrade}
	} else {
		upgrade = ""
	}
	pr := httputil.ProxyRequest{In: in, Out: out}
	pr.SetURL(f.target)
	setXForwardedIn(out.Header, in, &o.xfwd)
	f.obs.Outbound(out)
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
	if err := f.check(res); err != nil {
		res.Body.Close()
		f.funnel.handle(w, out, err)
		return
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		f.tunnel(w, out, res)
		return
	}
	removeHopHeaders(res.Header)
	f.obs.Response(res)
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
		// Abort the response under a server, which recovers
		// http.ErrAbortHandler quietly; elsewhere (a handler called
		// directly) only log.
		if in.Context().Value(http.ServerContextKey) == nil {
			f.log.Warn("proxy: body copy failed outside a server, response not aborted", slog.String("error", err.Error()))
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

// check refuses a response no client may get: a status below 100
// (errStatusBelow100; the exchanges refuse it first, as written, for the
// requests they time or watch) and a switch of protocols the request did
// not ask for (see refuseUnaskedSwitch).
func (f *forwarder) check(res *http.Response) error {
	if res.StatusCode < 100 {
		return errStatusBelow100
	}
	return refuseUnaskedSwitch(res)
}

// forwardedQuery returns the query the upstream gets for the inbound
// query q: q as it came, unless it holds a ';' or a malformed percent
// escape. Upstreams differ on whether ';' separates parameters as '&'
// does, so such a query could carry a parameter the gateway never read
// (a method override, say) to one that reads it; it is forwarded instead
// as the parameters url.ParseQuery accepts, re-encoded in its order
// (sorted by key), without the ones it refuses.
func forwardedQuery(q string) string {
	for i := 0; i < len(q); i++ {
		switch q[i] {
		case ';':
			return reencodeQuery(q)
		case '%':
			if i+2 >= len(q) || !isHex(q[i+1]) || !isHex(q[i+2]) {
				return reencodeQuery(q)
			}
			i += 2
		}
	}
	return q
}

// reencodeQuery is the query of the parameters of q url.ParseQuery
// accepts.
func reencodeQuery(q string) string {
	v, _ := url.ParseQuery(q) // the error names what was dropped
	return v.Encode()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
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

// tunnel completes a permitted upgrade: it writes res, the upstream's 101,
// on the client's hijacked connection and copies bytes both ways until
// either side ends; the request's context ending closes both. A failure
// before the 101 reached the client goes through the error funnel.
func (f *forwarder) tunnel(w http.ResponseWriter, out *http.Request, res *http.Response) {
	back, ok := res.Body.(io.ReadWriteCloser)
	if !ok {
		res.Body.Close()
		f.funnel.handle(w, out, fmt.Errorf("proxy: the transport's 101 response has a body that cannot be written (%T)", res.Body))
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		back.Close()
		f.funnel.handle(w, out, fmt.Errorf("proxy: switching protocols: %w", err))
		return
	}
	defer conn.Close()
	defer back.Close()
	stop := context.AfterFunc(out.Context(), func() { back.Close() })
	defer stop()
	copyHeader(w.Header(), res.Header)
	res.Header, res.Body = w.Header(), nil // res.Write then writes the head only
	if err := res.Write(brw); err != nil {
		f.log.Info("proxy: writing the 101 to the client failed", slog.String("error", err.Error()))
		return
	}
	if err := brw.Flush(); err != nil {
		f.log.Info("proxy: writing the 101 to the client failed", slog.String("error", err.Error()))
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst io.Writer, src io.Reader) {
		io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(conn, back)
	go pipe(back, brw.Reader) // with what the server read ahead
	<-done                    // the deferred closes end the other direction
}

// streams reports whether res's body is flushed to the client after
// every write: a text/event-stream or a body of unknown length.
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
			f.log.Warn("proxy: read error during body copy", slog.String("error", rerr.Error()))
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
