package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
)

// errorFunnel is the one place where a failed exchange becomes a status.
type errorFunnel struct {
	upstream  string
	log       *slog.Logger
	write     func(w http.ResponseWriter, r *http.Request, status int, code, message string)
	onFailure func(r *http.Request, status int, written bool) // Observer.Failure, may be nil
}

// fail answers a request the proxy could not forward or got no response
// for: it tells onFailure when the upstream did not serve it (and whether
// the upstream had the whole request), then writes the error. Every such
// answer passes here, the breaker's and the shedder's refusals included
// (with the inbound request, which no attempt wrote).
func (f *errorFunnel) fail(w http.ResponseWriter, r *http.Request, status int, code, message string) {
	f.failWritten(w, r, status, code, message, false)
}

// failWritten is fail for an exchange that wrote the whole request when
// written is true.
func (f *errorFunnel) failWritten(w http.ResponseWriter, r *http.Request, status int, code, message string, written bool) {
	if f.onFailure != nil {
		switch status {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			f.onFailure(r, status, written)
		}
	}
	f.write(w, r, status, code, message)
}

// handle answers a failed exchange with the status classify gives err.
// r is the outbound request.
func (f *errorFunnel) handle(w http.ResponseWriter, r *http.Request, err error) {
	// The outbound request carries the inbound context, which net/http
	// cancels when the client goes away, including when its upload breaks
	// off (the failed read of the body cancels it before the error
	// reaches the transport).
	status, code, message := classify(r.Context().Err() != nil, err)
	level := slog.LevelWarn
	if status == StatusClientClosedRequest || status == http.StatusRequestEntityTooLarge {
		level = slog.LevelInfo // the caller's doing, not the upstream's
	}
	f.log.LogAttrs(r.Context(), level, "upstream exchange failed",
		slog.String("upstream", f.upstream),
		slog.Int("status", status),
		slog.String("code", code),
		slog.String("method", r.Method),
		slog.String("request_id", r.Header.Get("X-Request-Id")),
		slog.String("error", err.Error()),
	)
	f.failWritten(w, r, status, code, message, wroteInFull(err))
}

// classify maps the error of an exchange to a status, a code and a message
// for the client. A client that left wins over any other cause, since
// nothing can reach it.
func classify(clientGone bool, err error) (status int, code, message string) {
	if clientGone {
		return StatusClientClosedRequest, CodeClientClosed, "the client closed the request"
	}
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return http.StatusRequestEntityTooLarge, CodeTooLarge, "the request body is too large"
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return http.StatusGatewayTimeout, CodeTimeout, "the upstream service did not answer in time"
	}
	return http.StatusBadGateway, CodeUnavailable, "the upstream service is unavailable"
}

// writePlainError is NopObserver.Error: the message as plain
// text, or only the status for 499.
func writePlainError(w http.ResponseWriter, _ *http.Request, status int, _ string, message string) {
	if status == StatusClientClosedRequest {
		w.WriteHeader(status)
		return
	}
	http.Error(w, message, status)
}
