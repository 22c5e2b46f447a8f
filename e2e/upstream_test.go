package e2e

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// upstream is a real HTTP server behind the gateway. What it does depends on
// the first path segment of the request:
//
//	/hang/...   never answers: it waits until the gateway gives up (the
//	            request's context ends) or the test ends
//	/reset/...  hijacks the connection and closes it without a response
//	/fail/...   answers 503 with a plain-text body "upstream failed"
//	anything    200 "ok", after reading the whole body
//
// It records the path and body size of every request it receives.
type upstream struct {
	srv     *httptest.Server
	release chan struct{} // closed when the test ends, freeing hung handlers

	mu   sync.Mutex
	seen []seenRequest
}

// seenRequest is what the upstream received.
type seenRequest struct {
	Method, Path string
	BodyLen      int
	BodyErr      string // how reading the body failed; "" when it was complete
	Tenant       string // X-Quotagate-Tenant
	Auth         string // Authorization, which must never arrive
	Header       http.Header
}

// startUpstream starts an upstream on 127.0.0.1 and closes it when t ends.
func startUpstream(t testing.TB) *upstream {
	t.Helper()
	u := &upstream{release: make(chan struct{})}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(func() {
		close(u.release)
		u.srv.CloseClientConnections()
		u.srv.Close()
	})
	return u
}

// URL is the upstream's base URL.
func (u *upstream) URL() string { return u.srv.URL }

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	n, err := io.Copy(io.Discard, r.Body)
	bodyErr := ""
	if err != nil {
		bodyErr = err.Error()
	}
	u.mu.Lock()
	u.seen = append(u.seen, seenRequest{Method: r.Method, Path: r.URL.Path, BodyLen: int(n), BodyErr: bodyErr,
		Tenant: r.Header.Get("X-Quotagate-Tenant"), Auth: r.Header.Get("Authorization"), Header: r.Header.Clone()})
	u.mu.Unlock()
	first, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	switch first {
	case "hang":
		select {
		case <-r.Context().Done():
		case <-u.release:
		}
	case "reset":
		hj, ok := w.(http.Hijacker)
		if !ok {
			http.Error(w, "no hijacking", http.StatusInternalServerError)
			return
		}
		conn, _, err := hj.Hijack()
		if err == nil {
			_ = conn.Close()
		}
	case "fail":
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "upstream failed")
	default:
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "ok")
	}
}

// requests returns a copy of what the upstream has received.
func (u *upstream) requests() []seenRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenRequest(nil), u.seen...)
}

// sawPath reports whether any request's path contains s.
func (u *upstream) sawPath(s string) bool {
	for _, r := range u.requests() {
		if strings.Contains(r.Path, s) {
			return true
		}
	}
	return false
}
