package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"
)

// TransportOptions tunes NewTransport. Zero fields take the default in
// their comment.
type TransportOptions struct {
	// DialTimeout bounds establishing a TCP connection; 0 = 5s.
	DialTimeout time.Duration
	// KeepAlive is the TCP keep-alive probe interval; 0 = 30s, negative
	// disables probes.
	KeepAlive time.Duration
	// TLSHandshakeTimeout bounds a TLS handshake; 0 = 5s.
	TLSHandshakeTimeout time.Duration
	// IdleConnTimeout closes a connection idle this long; 0 = 90s.
	IdleConnTimeout time.Duration
	// MaxIdleConns caps idle connections over all upstreams; 0 = 1024.
	MaxIdleConns int
	// MaxIdleConnsPerHost caps idle connections per upstream host, which
	// bounds how many concurrent requests can reuse connections; 0 = 256.
	MaxIdleConnsPerHost int
	// MaxConnsPerHost caps all connections per upstream host; 0 = no cap.
	MaxConnsPerHost int
	// ExpectContinueTimeout is how long to wait for "100 Continue" before
	// sending a body when the request asks for it; 0 = 1s.
	ExpectContinueTimeout time.Duration
	// TLSClientConfig configures TLS to https upstreams; nil = system roots.
	TLSClientConfig *tls.Config
	// NoDirect sends every request through net/http's Transport, direct
	// exchanges included (see Transport).
	NoDirect bool
}

// Transport is the gateway's transport to upstreams. A request without a
// body to an http upstream (any method but CONNECT, not upgrading; see
// directEligible) is a direct exchange: written and answered on the caller's goroutine, over
// connections the Transport keeps alive itself (see direct.go). Every
// other request goes to the embedded net/http Transport, whose fields
// may be changed before first use; setting its Proxy, DisableKeepAlives
// or MaxConnsPerHost turns direct exchanges off, and a DialContext set on
// it dials them too.
type Transport struct {
	*http.Transport
	direct *directPool // nil = none
}

// NewTransport returns a transport tuned for a gateway: keep-alive with a
// large idle pool per upstream, bounded dial and TLS handshake, HTTP/2 when
// the upstream offers it over TLS, no proxy from the environment, and no
// transparent compression (Accept-Encoding and compressed bodies pass
// through unchanged). It sets no ResponseHeaderTimeout: Upstream.Timeout
// bounds the wait for response headers per upstream. Share one transport
// among all handlers.
func NewTransport(o TransportOptions) *Transport {
	def := func(v, d time.Duration) time.Duration {
		if v == 0 {
			return d
		}
		return v
	}
	defInt := func(v, d int) int {
		if v == 0 {
			return d
		}
		return v
	}
	dialer := &net.Dialer{
		Timeout:   def(o.DialTimeout, 5*time.Second),
		KeepAlive: def(o.KeepAlive, 30*time.Second),
	}
	t := &Transport{Transport: &http.Transport{
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		TLSClientConfig:       o.TLSClientConfig,
		TLSHandshakeTimeout:   def(o.TLSHandshakeTimeout, 5*time.Second),
		IdleConnTimeout:       def(o.IdleConnTimeout, 90*time.Second),
		MaxIdleConns:          defInt(o.MaxIdleConns, 1024),
		MaxIdleConnsPerHost:   defInt(o.MaxIdleConnsPerHost, 256),
		MaxConnsPerHost:       o.MaxConnsPerHost,
		ExpectContinueTimeout: def(o.ExpectContinueTimeout, time.Second),
		DisableCompression:    true,
	}}
	if !o.NoDirect {
		std := t.Transport
		t.direct = &directPool{
			dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
				if d := std.DialContext; d != nil {
					return d(ctx, network, addr)
				}
				return dialer.DialContext(ctx, network, addr)
			},
			idleTimeout:    std.IdleConnTimeout,
			maxIdlePerHost: std.MaxIdleConnsPerHost,
			maxIdle:        std.MaxIdleConns,
			now:            time.Now,
			headerLimit:    directHeaderLimit,
			peekIdle:       peekIdle,
		}
	}
	return t
}

// RoundTrip sends req as a direct exchange when it can be one, and
// through the net/http Transport otherwise.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.takesDirect(req) {
		return t.direct.roundTrip(req, Limits{})
	}
	return t.Transport.RoundTrip(req)
}

// RoundTripLimited keeps l itself for a direct exchange (see
// LimitedTransport), and leaves every other request to the handler.
func (t *Transport) RoundTripLimited(req *http.Request, l Limits) (*http.Response, bool, error) {
	if !t.takesDirect(req) {
		return nil, false, nil
	}
	resp, err := t.direct.roundTrip(req, l)
	return resp, true, err
}

// takesDirect reports whether req is sent as a direct exchange.
func (t *Transport) takesDirect(req *http.Request) bool {
	return t.directOn() && directEligible(req)
}

// directOn reports whether t sends the requests directEligible accepts
// as direct exchanges: unless it was built with NoDirect, or its Proxy,
// DisableKeepAlives or MaxConnsPerHost was set since.
func (t *Transport) directOn() bool {
	return t.direct != nil && t.Transport.Proxy == nil && !t.Transport.DisableKeepAlives &&
		t.Transport.MaxConnsPerHost == 0
}

// CloseIdleConnections closes the idle connections of both kinds of
// exchange.
func (t *Transport) CloseIdleConnections() {
	t.Transport.CloseIdleConnections()
	if t.direct != nil {
		t.direct.closeIdle()
	}
}

// errHeaderTimeout is the cause of an exchange cut by Upstream.Timeout. It
// wraps context.DeadlineExceeded, so the funnel maps it to 504.
var errHeaderTimeout = fmt.Errorf("no response headers within the upstream timeout: %w", context.DeadlineExceeded)

// exchanges is the transport under every handler: it bounds each round
// trip until the response headers arrive (timeout, when positive), and no
// longer, so that the response body is read under a context the timer can
// no longer cut; and it finds out, for the requests watch selects,
// whether the whole request was written (see Observer.Failure). A round
// trip that needs neither the timer nor the watch costs no allocation
// here.
type exchanges struct {
	next    http.RoundTripper
	limited LimitedTransport // next, when it is one; nil otherwise
	timeout time.Duration    // 0 = none
	after   afterFunc
	watch   func(out *http.Request) bool // nil = none
}

// newExchanges returns the exchanges over next.
func newExchanges(next http.RoundTripper, timeout time.Duration, after afterFunc, watch func(*http.Request) bool) *exchanges {
	limited, _ := next.(LimitedTransport)
	return &exchanges{next: next, limited: limited, timeout: timeout, after: after, watch: watch}
}

// States of an exchange's race between its timer and its response headers.
const (
	pending int32 = iota
	arrived
	timedOut
)

// exchange is one round trip, in one allocation: the timer's side of the
// race, the context it cancels, whether the request was written, and, once
// the response arrived, its body, which releases the context when closed.
type exchange struct {
	io.ReadCloser // the response body; nil until the response arrived
	// state decides the race between the timer and the response headers:
	// whoever moves it from pending first wins, and the loser does nothing.
	state atomic.Int32
	// written is set once an attempt wrote the whole request (see
	// watchedExchange). Next to state, it takes no room of its own.
	written atomic.Bool
	cancel  context.CancelCauseFunc // nil without a timeout
	// abort is the request body's ReadAborter, aborted when the timer
	// wins; nil without a timeout or such a body.
	abort ReadAborter
}

// watchedExchange is an exchange whose write is watched, with its trace
// in the same allocation. The trace is kept out of exchange, which it
// would double in size, for the exchanges not watched.
type watchedExchange struct {
	exchange
	trace httptrace.ClientTrace
}

// expire is the timer's side: it cuts the exchange unless the response
// headers arrived first.
// It also aborts a read of the request body that waits for the client
// (see ReadAborter).
func (e *exchange) expire() {
	if e.state.CompareAndSwap(pending, timedOut) {
		e.cancel(errHeaderTimeout)
		if e.abort != nil {
			e.abort.AbortRead()
		}
	}
}

// release ends the round trip's context, when it has its own.
func (e *exchange) release() {
	if e.cancel != nil {
		e.cancel(nil)
	}
}

// Close closes the response body and releases the round trip's context.
func (e *exchange) Close() error {
	err := e.ReadCloser.Close()
	e.release()
	return err
}

// Limits is what a handler asks of one exchange beyond RoundTrip: a bound
// on the wait for the response headers, and whether to report the write.
// Its fields are the proxy's own; a LimitedTransport that wraps another
// passes it on unchanged.
type Limits struct {
	timeout time.Duration // 0 = none
	after   afterFunc
	watch   bool
}

// A LimitedTransport can keep an exchange's Limits itself, for some
// requests, more cheaply than the handler's own timer, context and trace
// around RoundTrip. Transport is one, for the requests it sends as direct
// exchanges.
type LimitedTransport interface {
	http.RoundTripper
	// RoundTripLimited sends req as RoundTrip does, within l: when the
	// response headers have not arrived within the timeout, the exchange
	// fails with an error wrapping context.DeadlineExceeded; and when l
	// asks to watch the write, an error of an exchange that wrote the
	// whole request is marked as such (see Observer.Failure). handled is
	// false, with nothing done, when the transport cannot do so for req;
	// the handler then bounds RoundTrip itself.
	RoundTripLimited(req *http.Request, l Limits) (resp *http.Response, handled bool, err error)
}

func (t *exchanges) RoundTrip(req *http.Request) (*http.Response, error) {
	watch := t.watch != nil && t.watch(req)
	if t.timeout <= 0 && !watch {
		return t.next.RoundTrip(req)
	}
	if t.limited != nil {
		resp, handled, err := t.limited.RoundTripLimited(req, Limits{timeout: t.timeout, after: t.after, watch: watch})
		if handled {
			if err == nil && resp.StatusCode == http.StatusSwitchingProtocols && watch {
				markSwitchWritten(resp)
			}
			return resp, err
		}
	}
	var e *exchange
	ctx := req.Context()
	if watch {
		we := &watchedExchange{}
		e = &we.exchange
		we.trace.WroteRequest = e.wroteRequest
		ctx = httptrace.WithClientTrace(ctx, &we.trace)
	} else {
		e = &exchange{}
	}
	var timer stopper
	if t.timeout > 0 {
		ctx, e.cancel = context.WithCancelCause(ctx)
		e.abort, _ = req.Body.(ReadAborter)
		timer = t.after(t.timeout, e.expire)
	}
	resp, err := t.next.RoundTrip(req.WithContext(ctx))
	if timer != nil {
		timer.Stop()
	}
	if !e.state.CompareAndSwap(pending, arrived) {
		// The timer won. If a response made it anyway, its body is cut off
		// by the canceled context: report the timeout instead.
		if resp != nil {
			resp.Body.Close()
		}
		e.cancel(errHeaderTimeout)
		return nil, e.mark(fmt.Errorf("after %v: %w", t.timeout, errHeaderTimeout))
	}
	if err != nil {
		e.release()
		return nil, e.mark(err)
	}
	if resp.StatusCode < 100 {
		// Refused here rather than by the forwarder's check, which
		// cannot tell whether the request was written: a malformed
		// response, as over a direct exchange (errStatusBelow100).
		resp.Body.Close()
		e.release()
		return nil, e.mark(errStatusBelow100)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// The body must stay the transport's read-write connection; the
		// context ends with the inbound request. The forwarder refuses
		// an unasked switch after this returns (refuseUnaskedSwitch), as
		// a failure of an exchange that wrote the request when it did.
		if e.written.Load() {
			markSwitchWritten(resp)
		}
		return resp, nil
	}
	if e.cancel == nil {
		return resp, nil // no context to release
	}
	e.ReadCloser = resp.Body
	resp.Body = e
	return resp, nil
}

// switchedWrittenKey marks the context of a 101's request that was
// written whole (the only response whose refusal is a failure).
type switchedWrittenKey struct{}

// markSwitchWritten marks the request of resp, a 101 to a request written
// whole, when the proxy will refuse the switch.
func markSwitchWritten(resp *http.Response) {
	if resp.Request != nil && refuseUnaskedSwitch(resp) != nil {
		resp.Request = resp.Request.WithContext(context.WithValue(resp.Request.Context(), switchedWrittenKey{}, true))
	}
}

// bufferSize is the size of the buffers that copy response bodies.
const bufferSize = 32 << 10

// bufferPool is an httputil.BufferPool backed by a sync.Pool of
// *[bufferSize]byte. The pool holds array pointers, which a buffer of full
// capacity converts back to without allocating, so neither Get nor Put
// allocates once the pool is warm (a pool of *[]byte would allocate a slice
// header on every Put).
type bufferPool struct{ pool sync.Pool }

// defaultBufferPool is shared by every handler built without a BufferPool.
var defaultBufferPool = newBufferPool()

func newBufferPool() *bufferPool {
	return &bufferPool{pool: sync.Pool{New: func() any { return new([bufferSize]byte) }}}
}

func (p *bufferPool) Get() []byte { return p.pool.Get().(*[bufferSize]byte)[:] }

// Put takes back a buffer of at least bufferSize capacity; smaller ones
// (not from Get) are left to the garbage collector.
func (p *bufferPool) Put(b []byte) {
	if cap(b) < bufferSize {
		return
	}
	p.pool.Put((*[bufferSize]byte)(b[:bufferSize]))
}
