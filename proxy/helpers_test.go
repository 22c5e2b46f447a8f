package proxy

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/internal/syncbuf"
)

// waitFor is how long a test waits for something that should happen at once
// before it fails; it only bounds a hang.
const waitFor = 10 * time.Second

// errorCall is one call of Options.WriteError.
type errorCall struct {
	status int
	code   string
}

// errorLog records WriteError calls and writes a recognizable body.
type errorLog struct {
	mu    sync.Mutex
	calls []errorCall
}

func (l *errorLog) write(w http.ResponseWriter, _ *http.Request, status int, code, message string) {
	l.mu.Lock()
	l.calls = append(l.calls, errorCall{status, code})
	l.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(status)
	w.Write([]byte(code + ": " + message))
}

func (l *errorLog) get() []errorCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]errorCall(nil), l.calls...)
}

// fixture is a gateway front server whose only job is to call the proxy
// handler, plus what the handler reported.
type fixture struct {
	front  *httptest.Server
	errs   *errorLog
	logs   *syncbuf.Buffer
	served chan struct{} // receives once per request after the handler returns
}

// newFixture builds the proxy handler for upstream URL raw and serves it
// from a test server. after may be nil for the real clock; opts adjust the
// handler's Options.
func newFixture(t *testing.T, raw string, timeout time.Duration, after afterFunc, opts ...func(*testOptions)) *fixture {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if after == nil {
		after = stdAfterFunc
	}
	f := &fixture{errs: &errorLog{}, logs: &syncbuf.Buffer{}, served: make(chan struct{}, 16)}
	transport := NewTransport(TransportOptions{})
	t.Cleanup(transport.CloseIdleConnections)
	o := &testOptions{Options: Options{
		Transport: transport,
		Logger:    slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}, hooks: hooks{WriteError: f.errs.write}}
	for _, opt := range opts {
		opt(o)
	}
	h, err := newHandler(Upstream{Name: "test", URL: u, Timeout: timeout}, o.build(), after)
	if err != nil {
		t.Fatal(err)
	}
	f.front = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { f.served <- struct{}{} }()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(f.front.Close)
	return f
}

// waitServed waits until the front handler has returned once.
func (f *fixture) waitServed(t *testing.T) {
	t.Helper()
	select {
	case <-f.served:
	case <-time.After(waitFor):
		proctest.FatalOverrun(t, "the proxy handler did not return within %v", waitFor)
	}
}

// manualTimer is an afterFunc whose timers fire only when the test says so.
type manualTimer struct {
	mu      sync.Mutex
	pending []*manualEntry
}

type manualEntry struct {
	f       func()
	stopped bool
	fired   bool
}

// stopFunc is a stopper made of a function.
type stopFunc func() bool

func (f stopFunc) Stop() bool { return f() }

func (m *manualTimer) after(_ time.Duration, f func()) stopper {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := &manualEntry{f: f}
	m.pending = append(m.pending, e)
	return stopFunc(func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		was := !e.stopped && !e.fired
		e.stopped = true
		return was
	})
}

// fire runs every timer not stopped or fired yet and returns how many ran.
func (m *manualTimer) fire() int {
	m.mu.Lock()
	var run []func()
	for _, e := range m.pending {
		if !e.stopped && !e.fired {
			e.fired = true
			run = append(run, e.f)
		}
	}
	m.mu.Unlock()
	for _, f := range run {
		f()
	}
	return len(run)
}

// stoppedCount returns how many timers were stopped.
func (m *manualTimer) stoppedCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, e := range m.pending {
		if e.stopped && !e.fired {
			n++
		}
	}
	return n
}

// resetConn closes the connection under w with a TCP reset, as a crashed
// upstream does.
func resetConn(t *testing.T, w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Error(err)
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0) // close with RST
	}
	conn.Close()
}

// hooks is an Observer made of functions, as tests set them; a nil
// function does what NopObserver does, except that with OnFailure set and
// WatchWrite nil every request's write is watched.
type hooks struct {
	WriteError      func(w http.ResponseWriter, r *http.Request, status int, code, message string)
	SetHeaders      func(out *http.Request)
	AllowUpgrade    func(in *http.Request) bool
	TierOf          func(in *http.Request) string
	OnShed          func(in *http.Request, tier string)
	ObserveResponse func(resp *http.Response)
	OnFailure       func(r *http.Request, status int, written bool)
	WatchWrite      func(out *http.Request) bool
}

func (h *hooks) Outbound(out *http.Request) {
	if h.SetHeaders != nil {
		h.SetHeaders(out)
	}
}

func (h *hooks) Upgrade(in *http.Request) bool { return h.AllowUpgrade != nil && h.AllowUpgrade(in) }

func (h *hooks) Tier(in *http.Request) string {
	if h.TierOf != nil {
		return h.TierOf(in)
	}
	return ""
}

func (h *hooks) Shed(in *http.Request, tier string) {
	if h.OnShed != nil {
		h.OnShed(in, tier)
	}
}

func (h *hooks) Response(resp *http.Response) {
	if h.ObserveResponse != nil {
		h.ObserveResponse(resp)
	}
}

func (h *hooks) Watch(out *http.Request) bool {
	if h.WatchWrite != nil {
		return h.WatchWrite(out)
	}
	return h.OnFailure != nil
}

func (h *hooks) Failure(r *http.Request, status int, written bool) {
	if h.OnFailure != nil {
		h.OnFailure(r, status, written)
	}
}

func (h *hooks) Error(w http.ResponseWriter, r *http.Request, status int, code, message string) {
	if h.WriteError != nil {
		h.WriteError(w, r, status, code, message)
		return
	}
	NopObserver{}.Error(w, r, status, code, message)
}

// testOptions are a handler's Options with its observer's hooks, as a
// test's option functions set them.
type testOptions struct {
	Options
	hooks
}

// build returns the Options with the hooks as their Observer.
func (o *testOptions) build() Options {
	opts := o.Options
	opts.Observer = &o.hooks
	return opts
}
