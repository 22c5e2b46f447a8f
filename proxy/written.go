package proxy

import (
	"errors"
	"net/http/httptrace"
)

// writtenErr marks the error of an exchange that wrote the whole request
// to the upstream (see Observer.Failure). The transport may make several
// attempts (it retries an idempotent request on a fresh connection when a
// reused one failed); any attempt that wrote the request counts, since the
// upstream then had it whatever became of the later ones. It unwraps to
// the exchange's error, so the funnel classifies it as that error.
type writtenErr struct{ error }

func (e writtenErr) Unwrap() error { return e.error }

// wroteInFull reports whether err is the error of an exchange that wrote
// the whole request (an exchange the proxy watched: see
// Observer.Watch). It is false for nil and for errors from elsewhere.
func wroteInFull(err error) bool {
	var w writtenErr
	return errors.As(err, &w)
}

// wroteRequest is the trace's WroteRequest: the request line, headers and
// body were all written (and flushed) when info.Err is nil.
func (e *exchange) wroteRequest(info httptrace.WroteRequestInfo) {
	if info.Err == nil {
		e.written.Store(true)
	}
}

// mark returns err marked as written when an attempt of e wrote the whole
// request. The HTTP/1 transport reports each attempt's write before its
// RoundTrip returns an error; over HTTP/2 a round trip cut by its context
// returns without waiting for the write, which then counts only if it had
// ended.
func (e *exchange) mark(err error) error {
	if e.written.Load() {
		return writtenErr{err}
	}
	return err
}
