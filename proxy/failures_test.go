package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
)

// getStatus sends GET path to the fixture and returns status and body.
func getStatus(t *testing.T, f *fixture, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(f.front.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// wantOneError checks that WriteError was called exactly once, with status.
func wantOneError(t *testing.T, f *fixture, status int, code string) {
	t.Helper()
	calls := f.errs.get()
	if len(calls) != 1 || calls[0] != (errorCall{status, code}) {
		t.Errorf("WriteError calls = %v, want one {%d %s}", calls, status, code)
	}
	if logs := f.logs.String(); !strings.Contains(logs, fmt.Sprintf("status=%d", status)) || !strings.Contains(logs, "code="+code) {
		t.Errorf("log %q does not record status %d, code %s", logs, status, code)
	}
}

func TestClosedPortIs502(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	f := newFixture(t, "http://"+addr, time.Minute, nil)
	status, body := getStatus(t, f, "/x")
	if status != http.StatusBadGateway || !strings.HasPrefix(body, CodeUnavailable) {
		t.Errorf("got %d %q, want 502 %s", status, body, CodeUnavailable)
	}
	wantOneError(t, f, http.StatusBadGateway, CodeUnavailable)
}

// TestResetIs502: an upstream that accepts and then drops the connection
// without answering.
func TestResetIs502(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resetConn(t, w)
	}))
	defer up.Close()
	f := newFixture(t, up.URL, time.Minute, nil)
	status, _ := getStatus(t, f, "/x")
	if status != http.StatusBadGateway {
		t.Errorf("got %d, want 502", status)
	}
	wantOneError(t, f, http.StatusBadGateway, CodeUnavailable)
}

// hangingUpstream answers nothing until the request's context ends. It
// reports each arrival on arrived.
func hangingUpstream(t *testing.T) (*httptest.Server, chan struct{}) {
	arrived := make(chan struct{}, 4)
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); up.Close() })
	return up, arrived
}

// TestTimeoutIs504 uses the real clock and a short timeout.
func TestTimeoutIs504(t *testing.T) {
	up, _ := hangingUpstream(t)
	f := newFixture(t, up.URL, 50*time.Millisecond, nil)
	start := time.Now()
	status, body := getStatus(t, f, "/x")
	if status != http.StatusGatewayTimeout || !strings.HasPrefix(body, CodeTimeout) {
		t.Errorf("got %d %q, want 504 %s", status, body, CodeTimeout)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("504 after %v, before the 50ms timeout", d)
	}
	wantOneError(t, f, http.StatusGatewayTimeout, CodeTimeout)
}

// TestTimeoutIs504Manual fires the timeout explicitly while the upstream is
// known to be waiting.
func TestTimeoutIs504Manual(t *testing.T) {
	up, arrived := hangingUpstream(t)
	clock := &manualTimer{}
	f := newFixture(t, up.URL, time.Hour, clock.after)
	type result struct {
		status int
		body   string
	}
	done := make(chan result, 1)
	go func() {
		resp, err := http.Get(f.front.URL + "/x")
		if err != nil {
			done <- result{0, err.Error()}
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- result{resp.StatusCode, string(body)}
	}()
	select {
	case <-arrived:
	case <-time.After(waitFor):
		proctest.FatalOverrun(t, "the request did not reach the upstream within %v", waitFor)
	}
	if n := clock.fire(); n != 1 {
		t.Fatalf("fired %d timers, want 1", n)
	}
	select {
	case r := <-done:
		if r.status != http.StatusGatewayTimeout {
			t.Errorf("got %d %q, want 504", r.status, r.body)
		}
	case <-time.After(waitFor):
		proctest.FatalOverrun(t, "no answer within %v of the timeout firing", waitFor)
	}
	wantOneError(t, f, http.StatusGatewayTimeout, CodeTimeout)
}

// TestClientGoneIs499: the client cancels while the upstream is waiting;
// the handler returns, the upstream's request is canceled, and 499 is
// recorded without a write reaching anyone.
func TestClientGoneIs499(t *testing.T) {
	upCanceled := make(chan struct{})
	arrived := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done()
		close(upCanceled)
	}))
	defer up.Close()
	var failures atomic.Int64
	f := newFixture(t, up.URL, time.Minute, nil, func(o *testOptions) {
		o.OnFailure = func(*http.Request, int, bool) { failures.Add(1) }
	})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", f.front.URL+"/x", nil)
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	select {
	case <-arrived:
	case <-time.After(waitFor):
		proctest.FatalOverrun(t, "the request did not reach the upstream within %v", waitFor)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("client error = %v, want context.Canceled", err)
	}
	f.waitServed(t)
	select {
	case <-upCanceled:
	case <-time.After(waitFor):
		proctest.FatalOverrun(t, "the upstream request was not canceled within %v", waitFor)
	}
	wantOneError(t, f, StatusClientClosedRequest, CodeClientClosed)
	if n := failures.Load(); n != 0 {
		t.Errorf("OnFailure called %d times for a client that left; the upstream may have served it", n)
	}
	if logs := f.logs.String(); !strings.Contains(logs, "level=INFO") {
		t.Errorf("499 not logged at Info: %q", logs)
	}
}

func TestClassify(t *testing.T) {
	const live, gone = false, true
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	dialTimeout := &net.OpError{Op: "dial", Net: "tcp", Err: timeoutErr{}}
	dns := &net.DNSError{Err: "no such host", Name: "nowhere.invalid", IsNotFound: true}
	tests := []struct {
		gone   bool
		err    error
		status int
		code   string
	}{
		{live, context.DeadlineExceeded, 504, CodeTimeout},
		{live, fmt.Errorf("wrapped: %w", errHeaderTimeout), 504, CodeTimeout},
		{live, dialTimeout, 504, CodeTimeout},
		{live, refused, 502, CodeUnavailable},
		{live, dns, 502, CodeUnavailable},
		{live, io.ErrUnexpectedEOF, 502, CodeUnavailable},
		{live, context.Canceled, 502, CodeUnavailable}, // not the client's
		{gone, context.Canceled, 499, CodeClientClosed},
		{gone, context.DeadlineExceeded, 499, CodeClientClosed},
		{gone, refused, 499, CodeClientClosed},
		{live, &http.MaxBytesError{Limit: 10}, 413, CodeTooLarge},
		{live, fmt.Errorf("write: %w", &http.MaxBytesError{}), 413, CodeTooLarge},
		{gone, &http.MaxBytesError{}, 499, CodeClientClosed},
	}
	for _, tt := range tests {
		status, code, msg := classify(tt.gone, tt.err)
		if status != tt.status || code != tt.code || msg == "" {
			t.Errorf("classify(%v, %v) = %d %s %q; want %d %s", tt.gone, tt.err, status, code, msg, tt.status, tt.code)
		}
		if strings.Contains(msg, "127.0.0.1") || strings.Contains(msg, "nowhere") {
			t.Errorf("message %q reveals internals", msg)
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// TestClientAbortsUploadIs499: the client announces a body, sends part of
// it and hangs up. The upstream did nothing wrong, so this is 499, not 502.
func TestClientAbortsUploadIs499(t *testing.T) {
	bodyStarted := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 5)
		io.ReadFull(r.Body, buf)
		close(bodyStarted)
		io.Copy(io.Discard, r.Body)
	}))
	defer up.Close()
	f := newFixture(t, up.URL, time.Minute, nil)
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.front.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nhello")
	select {
	case <-bodyStarted:
	case <-time.After(waitFor):
		proctest.FatalOverrun(t, "the body did not reach the upstream within %v", waitFor)
	}
	conn.Close()
	f.waitServed(t)
	wantOneError(t, f, StatusClientClosedRequest, CodeClientClosed)
}

// TestStatusBelow100Is502: an upstream status line may carry any three
// digits, and one below 100 is no status net/http can write: the
// handler's WriteHeader panicked (the client got the connection closed,
// no status, and OnFailure was not called), and a direct exchange took
// it for an informational response. It is a malformed response, a 502,
// over a direct exchange and over net/http's Transport alike, and
// OnFailure hears that the request was written (over net/http's
// Transport it heard it was not: the reverse proxy refused the status
// where the write was no longer known).
func TestStatusBelow100Is502(t *testing.T) {
	for _, noDirect := range []bool{false, true} {
		for _, status := range []string{"000", "099"} {
			t.Run(fmt.Sprintf("%s/nodirect=%v", status, noDirect), func(t *testing.T) {
				up := newScripted(t, func(conn, req int, r *http.Request, w *bufio.Writer) bool {
					io.WriteString(w, "HTTP/1.1 "+status+" Odd\r\nContent-Length: 2\r\n\r\nhi")
					return false // closes the connection, so that nothing waits on it
				})
				tr := NewTransport(TransportOptions{NoDirect: noDirect})
				t.Cleanup(tr.CloseIdleConnections)
				var failures []int
				var written []bool
				f := newFixture(t, up.url(), 0, nil, func(o *testOptions) {
					o.Transport = tr
					o.OnFailure = func(_ *http.Request, status int, w bool) {
						failures = append(failures, status)
						written = append(written, w)
					}
				})
				if code, body := getStatus(t, f, "/x"); code != http.StatusBadGateway || !strings.HasPrefix(body, CodeUnavailable) {
					t.Errorf("got %d %q, want 502 %s", code, body, CodeUnavailable)
				}
				f.waitServed(t)
				wantOneError(t, f, http.StatusBadGateway, CodeUnavailable)
				if len(failures) != 1 || failures[0] != http.StatusBadGateway {
					t.Errorf("OnFailure statuses %v, want [502]", failures)
				}
				// The upstream read the whole request before it answered.
				if len(written) != 1 || !written[0] {
					t.Errorf("OnFailure written %v, want [true]", written)
				}
			})
		}
	}
}
