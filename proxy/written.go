package proxy

import (
	"context"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
)

// writeWatch finds out whether an exchange wrote the whole request to the
// upstream (see Options.WatchWrite). The transport may make several
// attempts (it retries an idempotent request on a fresh connection when a
// reused one failed); any attempt that wrote the request counts, since the
// upstream then had it whatever became of the later ones.
type writeWatch struct {
	written atomic.Bool
	trace   httptrace.ClientTrace
}

// writeWatchKey is the context key of an exchange's *writeWatch.
type writeWatchKey struct{}

// watchWrite returns out with a context that records, for wroteInFull,
// whether the transport wrote the whole request. It costs a few small
// allocations: a copy of out, two context values and the trace.
func watchWrite(out *http.Request) *http.Request {
	w := &writeWatch{}
	w.trace.WroteRequest = w.wroteRequest
	ctx := httptrace.WithClientTrace(out.Context(), &w.trace)
	return out.WithContext(context.WithValue(ctx, writeWatchKey{}, w))
}

// wroteRequest is the trace's WroteRequest: the request line, headers and
// body were all written (and flushed) when info.Err is nil.
func (w *writeWatch) wroteRequest(info httptrace.WroteRequestInfo) {
	if info.Err == nil {
		w.written.Store(true)
	}
}

// wroteInFull reports whether an attempt of the exchange of the outbound
// request r wrote the whole request to the upstream. It is false when r was
// not watched (watchWrite), and for a request the proxy answered without
// contacting the upstream. The HTTP/1 transport reports each attempt's
// write before its RoundTrip returns, so the error funnel, which runs
// after, sees it; over HTTP/2 a round trip cut by its context returns
// without waiting for the write, which then counts only if it had ended.
func wroteInFull(r *http.Request) bool {
	w, _ := r.Context().Value(writeWatchKey{}).(*writeWatch)
	return w != nil && w.written.Load()
}
