package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Direct exchanges. net/http's Transport runs every HTTP/1 exchange on
// two goroutines of the connection (one writes the request, one reads the
// response) and hands the request and the response between them and the
// caller over channels: three goroutines take turns per request, each turn
// a park and a wake-up, which under load is a good part of what a proxied
// request costs. Most requests a gateway forwards have no body, and their
// exchange needs none of that: directPool writes such a request and reads
// its response on the caller's goroutine, over connections it keeps alive
// itself. Everything else (bodies, upgrades, https and HTTP/2, a proxy)
// stays with net/http's Transport. Under the same forwarder a small GET
// costs 96.7 k instructions this way against 126.0 k through net/http's
// Transport (BENCHMARKS.md, "One forwarder"), which is why this second
// HTTP/1 client exists.

// directEligible reports whether req can be a direct exchange: a request
// to an http (not https) URL with no body, no trailer, not CONNECT, not
// asking to upgrade or to close the connection, and not expecting 100
// Continue.
func directEligible(req *http.Request) bool {
	return req.Method != http.MethodConnect && req.URL != nil && req.URL.Scheme == "http" && req.URL.Host != "" &&
		(req.Body == nil || req.Body == http.NoBody) && req.ContentLength == 0 &&
		len(req.TransferEncoding) == 0 && len(req.Trailer) == 0 && !req.Close &&
		req.Header["Upgrade"] == nil && req.Header["Expect"] == nil
}

// idempotent reports whether req may be sent again after an attempt the
// upstream may have received: its method is GET, HEAD, OPTIONS or TRACE,
// or it carries an Idempotency-Key (or X-Idempotency-Key) header, as
// net/http's Transport takes it.
func idempotent(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return req.Header["Idempotency-Key"] != nil || req.Header["X-Idempotency-Key"] != nil
}

// Limits of a direct exchange.
const (
	// directHeaderLimit bounds what an upstream may send before its
	// response body (informational responses included), as net/http's
	// Transport does by default.
	directHeaderLimit = 10 << 20
	// directMax1xx bounds the informational responses before the final one.
	directMax1xx = 5
	// directBufSize is each direct connection's read and write buffer.
	directBufSize = 4 << 10
)

// errHeaderLimit is the error of a response whose headers exceed the
// pool's limit.
var errHeaderLimit = errors.New("proxy: upstream response headers too large")

// aLongTimeAgo is a deadline that interrupts a connection's pending read
// or write at once.
var aLongTimeAgo = time.Unix(1, 0)

// directPool keeps the connections of direct exchanges, per upstream
// host (a URL's, see dialAddr), and sends requests over them. It is safe for concurrent use.
type directPool struct {
	// dial opens a connection; it is asked each time, so a dialer replaced
	// on the transport after it was built is used.
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// idleTimeout closes a connection idle this long (> 0).
	idleTimeout time.Duration
	// maxIdlePerHost and maxIdle cap the idle connections kept per host and
	// over all hosts (> 0).
	maxIdlePerHost, maxIdle int
	// now is the clock that ages idle connections.
	now func() time.Time
	// headerLimit bounds a response's bytes before its body (> 0).
	headerLimit int64
	// peekIdle builds a connection's check before reuse (peekIdle).
	peekIdle func(net.Conn) func() bool

	mu        sync.Mutex
	idle      map[string][]*directConn // oldest first
	idleCount int
	reaper    *time.Timer // nil when no reap is due
}

// directConn is one upstream connection of a directPool.
type directConn struct {
	pool *directPool
	key  string // the upstream URL's host, see dialAddr
	conn net.Conn
	in   connReader // what br reads from conn
	br   *bufio.Reader
	bw   *bufio.Writer
	// reused is true when the connection served an exchange before the
	// current one.
	reused bool
	// idleSince is when the connection went back to the pool.
	idleSince time.Time
	// peek reports whether the idle connection still looks usable: open,
	// with nothing the upstream sent unasked (see peekIdle).
	peek func() bool
	// interruptFn is interrupt as a func value, made once per connection
	// rather than once per exchange.
	interruptFn func()
}

// connReader counts the bytes read from a connection since the
// current exchange began and, while limit is not negative, fails a read
// past limit bytes.
type connReader struct {
	conn  net.Conn
	n     int64
	limit int64 // < 0 = none
}

func (r *connReader) Read(p []byte) (int, error) {
	if r.limit >= 0 {
		left := r.limit - r.n
		if left <= 0 {
			return 0, errHeaderLimit
		}
		if int64(len(p)) > left {
			p = p[:left]
		}
	}
	n, err := r.conn.Read(p)
	r.n += int64(n)
	return n, err
}

// dialAddr is the address to dial for the pool key host, a URL's host
// with or without a port (80 when it has none). The key is the URL's host
// as it stands, so that a request to a URL without a port builds no
// address: only a dial does.
func dialAddr(host string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	return net.JoinHostPort(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), "80")
}

// roundTrip sends req, which directEligible accepted, and returns its
// response; the response body reads from the connection until it ends or
// is closed, and the connection then serves another exchange when the
// response allows it. A connection kept from an earlier exchange that
// fails before the upstream sent a byte of the response (an upstream
// closes idle connections when it likes) is discarded, and an idempotent
// request is sent again on another; any other request fails, since the
// upstream may have received it. Before a kept connection is used, a
// non-blocking peek at its socket finds most closed ones (peekIdle).
//
// l bounds the whole round trip, retries and dials included, by its
// timeout until the response headers, on its timer (see Limits), and
// marks the error of a round trip that wrote the whole request when it
// asks to watch the write.
func (p *directPool) roundTrip(req *http.Request, l Limits) (*http.Response, error) {
	if err := validHeader(req.Header); err != nil {
		return nil, err
	}
	ctx := req.Context()
	key := req.URL.Host
	var b *directBound
	if l.timeout > 0 {
		b = &directBound{timeout: l.timeout}
		timer := l.after(l.timeout, b.expire)
		defer timer.Stop()
	}
	wrote := false
	for {
		pc, err := p.get(ctx, key, l.timeout)
		if err == nil {
			var resp *http.Response
			var retry bool
			resp, retry, err = pc.exchange(ctx, req, b, &wrote)
			if err == nil {
				return resp, nil
			}
			if retry && idempotent(req) && ctx.Err() == nil {
				continue
			}
		} else if b != nil && b.state.Load() == timedOut {
			err = b.err()
		}
		if l.watch && wrote {
			err = writtenErr{err}
		}
		return nil, err
	}
}

// directBound is the timer's side of a direct round trip with a timeout:
// the race between the timer and the response headers (see exchange),
// and the connection the timer interrupts when it wins.
type directBound struct {
	timeout time.Duration
	state   atomic.Int32
	conn    atomic.Pointer[directConn] // the attempt under way; nil = none
}

// expire cuts the round trip unless the response headers arrived first.
func (b *directBound) expire() {
	if b.state.CompareAndSwap(pending, timedOut) {
		if pc := b.conn.Load(); pc != nil {
			pc.interrupt()
		}
	}
}

// watch makes pc the connection expire interrupts, at once when the
// timer has already won.
func (b *directBound) watch(pc *directConn) {
	b.conn.Store(pc)
	if b.state.Load() == timedOut {
		pc.interrupt()
	}
}

// err is the round trip's error once the timer won.
func (b *directBound) err() error {
	return fmt.Errorf("after %v: %w", b.timeout, errHeaderTimeout)
}

// validHeader refuses a header net/http's Transport would refuse: an
// invalid field name or a value with a control character.
func validHeader(h http.Header) error {
	for k, vv := range h {
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("proxy: invalid header field name %q", k)
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Errorf("proxy: invalid header field value for %q", k)
			}
		}
	}
	return nil
}

// exchange writes req on pc and reads the response headers, under b's
// timer when b is not nil; *wrote is set once the whole request was
// written. On failure pc is closed, and retry reports whether req may be
// sent again on another connection: pc had served an exchange before and
// the upstream sent nothing of a response on it.
func (pc *directConn) exchange(ctx context.Context, req *http.Request, b *directBound, wrote *bool) (resp *http.Response, retry bool, err error) {
	stop := context.AfterFunc(ctx, pc.interruptFn)
	if b != nil {
		b.watch(pc)
	}
	pc.in.n, pc.in.limit = 0, pc.pool.headerLimit
	trace := httptrace.ContextClientTrace(ctx)
	err = req.Write(pc.bw)
	if err == nil {
		err = pc.bw.Flush()
	}
	if trace != nil && trace.WroteRequest != nil {
		trace.WroteRequest(httptrace.WroteRequestInfo{Err: err})
	}
	if err == nil {
		*wrote = true
		resp, err = pc.readResponse(req, trace)
	}
	if err == nil && b != nil && !b.state.CompareAndSwap(pending, arrived) {
		err = errHeaderTimeout // the timer won as the headers arrived
	}
	if err != nil {
		stop()
		pc.conn.Close()
		switch {
		case ctx.Err() != nil:
			return nil, false, context.Cause(ctx)
		case b != nil && b.state.Load() == timedOut:
			return nil, false, b.err()
		}
		return nil, pc.reused && pc.in.n == 0, err
	}
	if b != nil {
		b.conn.Store(nil)
	}
	pc.in.limit = -1
	keep := !resp.Close && resp.StatusCode != http.StatusSwitchingProtocols
	if resp.Body == http.NoBody || resp.Body == nil {
		pc.finish(stop, keep)
		return resp, false, nil
	}
	resp.Body = &directBody{ReadCloser: resp.Body, ctx: ctx, pc: pc, stop: stop, keep: keep}
	return resp, false, nil
}

// readResponse reads the final response to req, passing informational
// (1xx) responses but 101 to the trace's Got1xxResponse. A status below
// 100 is a malformed response (errStatusBelow100), not an informational
// one.
func (pc *directConn) readResponse(req *http.Request, trace *httptrace.ClientTrace) (*http.Response, error) {
	for n := 0; ; n++ {
		resp, err := http.ReadResponse(pc.br, req)
		if err != nil {
			return nil, err
		}
		code := resp.StatusCode
		if code < 100 {
			return nil, errStatusBelow100
		}
		if code >= 200 || code == http.StatusSwitchingProtocols {
			return resp, nil
		}
		if n == directMax1xx {
			return nil, fmt.Errorf("proxy: more than %d informational responses", directMax1xx)
		}
		if trace != nil && trace.Got1xxResponse != nil {
			if err := trace.Got1xxResponse(code, textproto.MIMEHeader(resp.Header)); err != nil {
				return nil, err
			}
		}
	}
}

// interrupt makes the connection's pending read or write fail at once;
// it runs when the exchange's context ends.
func (pc *directConn) interrupt() { pc.conn.SetDeadline(aLongTimeAgo) }

// finish ends pc's exchange: stop ends the watch of its context, and the
// connection goes back to the pool when keep is true, the context did not
// interrupt it, and the upstream sent nothing past the response;
// otherwise it is closed.
func (pc *directConn) finish(stop func() bool, keep bool) {
	if stop() && keep && pc.br.Buffered() == 0 {
		pc.pool.put(pc)
		return
	}
	pc.conn.Close()
}

// directBody is the body of a direct exchange's response. Reading it to
// its end gives the connection back (see directConn.finish); closing it
// before closes the connection, as does a failed read.
type directBody struct {
	io.ReadCloser                 // net/http's body; never closed, which would drain it
	ctx           context.Context // the exchange's
	pc            *directConn
	stop          func() bool
	keep          bool
	state         atomic.Int32 // bodyOpen until the exchange ends
}

// The states of a directBody: open, read to its end, or closed before it
// (by Close or a failed read).
const (
	bodyOpen int32 = iota
	bodyEnded
	bodyClosed
)

// Read reads the body; once it ended, it returns io.EOF again, and after
// Close or a failed read, errBodyClosed. A read the end of the exchange's
// context interrupted fails with the context's cause (context.Canceled
// when the client went away), as over net/http's Transport, not with the
// deadline that interrupted it.
func (b *directBody) Read(p []byte) (int, error) {
	switch b.state.Load() {
	case bodyEnded:
		return 0, io.EOF
	case bodyClosed:
		return 0, errBodyClosed
	}
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.end(bodyEnded)
	} else if err != nil {
		b.end(bodyClosed)
		if b.ctx.Err() != nil {
			err = context.Cause(b.ctx)
		}
	}
	return n, err
}

// errBodyClosed is the error of a read after Close or after the body
// failed.
var errBodyClosed = errors.New("proxy: read on closed response body")

// Close ends the exchange; before the body's end it closes the
// connection, which interrupts a read under way. It always returns nil.
func (b *directBody) Close() error {
	b.end(bodyClosed)
	return nil
}

// end finishes the exchange once, in state (bodyEnded or bodyClosed).
func (b *directBody) end(state int32) {
	if b.state.CompareAndSwap(bodyOpen, state) {
		b.pc.finish(b.stop, b.keep && state == bodyEnded)
	}
}

// get returns a connection to key: the most recently used idle one that
// is still usable, or a new one, dialed within timeout when it is
// positive.
func (p *directPool) get(ctx context.Context, key string, timeout time.Duration) (*directConn, error) {
	for {
		p.mu.Lock()
		list := p.idle[key]
		if len(list) == 0 {
			p.mu.Unlock()
			break
		}
		pc := list[len(list)-1]
		list[len(list)-1] = nil
		p.idle[key] = list[:len(list)-1]
		p.idleCount--
		p.mu.Unlock()
		if p.now().Sub(pc.idleSince) < p.idleTimeout && pc.peek() {
			pc.reused = true
			return pc, nil
		}
		pc.conn.Close()
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	c, err := p.dial(ctx, "tcp", dialAddr(key))
	if err != nil {
		return nil, err
	}
	pc := &directConn{pool: p, key: key, conn: c, in: connReader{conn: c, limit: -1}}
	pc.br = bufio.NewReaderSize(&pc.in, directBufSize)
	pc.bw = bufio.NewWriterSize(c, directBufSize)
	pc.peek = p.peekIdle(c)
	pc.interruptFn = pc.interrupt
	return pc, nil
}

// put keeps pc for another exchange, or closes it when the pool is full.
func (p *directPool) put(pc *directConn) {
	pc.idleSince = p.now()
	p.mu.Lock()
	if len(p.idle[pc.key]) >= p.maxIdlePerHost || p.idleCount >= p.maxIdle {
		p.mu.Unlock()
		pc.conn.Close()
		return
	}
	if p.idle == nil {
		p.idle = make(map[string][]*directConn)
	}
	p.idle[pc.key] = append(p.idle[pc.key], pc)
	p.idleCount++
	if p.reaper == nil {
		p.reaper = time.AfterFunc(p.idleTimeout, p.reap)
	}
	p.mu.Unlock()
}

// reap closes the connections idle for idleTimeout or longer, and is due
// again while any stays idle.
func (p *directPool) reap() {
	now := p.now()
	var stale []*directConn
	p.mu.Lock()
	for key, list := range p.idle {
		n := 0
		for n < len(list) && now.Sub(list[n].idleSince) >= p.idleTimeout {
			n++
		}
		if n == 0 {
			continue
		}
		stale = append(stale, list[:n]...)
		clear(list[:n])
		if n == len(list) {
			delete(p.idle, key)
		} else {
			p.idle[key] = list[n:]
		}
		p.idleCount -= n
	}
	p.reaper = nil
	if p.idleCount > 0 {
		p.reaper = time.AfterFunc(p.idleTimeout, p.reap)
	}
	p.mu.Unlock()
	for _, pc := range stale {
		pc.conn.Close()
	}
}

// closeIdle closes every idle connection.
func (p *directPool) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.idleCount = nil, 0
	p.mu.Unlock()
	for _, list := range idle {
		for _, pc := range list {
			pc.conn.Close()
		}
	}
}
