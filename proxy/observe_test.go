package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/internal/upgradetest"
	"github.com/quotagate/quotagate/usage"
)

// watcher installs usage.Watch through Options.ObserveResponse and hands
// each Result to a channel.
type watcher struct {
	results  chan usage.Result
	observed chan *http.Request // the resp.Request of each observed response
}

func newWatcher(src usage.Source) (*watcher, func(*testOptions)) {
	w := &watcher{results: make(chan usage.Result, 8), observed: make(chan *http.Request, 8)}
	return w, func(o *testOptions) {
		o.ObserveResponse = func(resp *http.Response) {
			w.observed <- resp.Request
			usage.Watch(resp, src, 0, func(r usage.Result) { w.results <- r })
		}
	}
}

// result waits for the next Result.
func (w *watcher) result(t *testing.T) usage.Result {
	t.Helper()
	select {
	case r := <-w.results:
		return r
	case <-time.After(waitFor):
		proctest.FatalOverrun(t, "done was not called within %v", waitFor)
		return usage.Result{}
	}
}

// TestObserveKeepsSSEStreaming: with usage.Watch on the response, the
// first event reaches the client while the upstream still holds the rest
// back, and the usage in the last event is read.
func TestObserveKeepsSSEStreaming(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"delta\":\"Hi\",\"usage\":null}\n\n")
		http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-time.After(waitFor):
			return // the client never got the first event: no usage
		}
		io.WriteString(w, "data: {\"delta\":\"\",\"usage\":{\"total_tokens\":12}}\n\ndata: [DONE]\n\n")
	}))
	defer up.Close()
	wt, opt := newWatcher(usage.Source{SSE: "usage.total_tokens"})
	f := newFixture(t, up.URL, time.Minute, nil, opt)

	resp, err := http.Get(f.front.URL + "/v1/chat")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "data: {\"delta\":\"Hi\",\"usage\":null}\n" {
		t.Fatalf("first event = %q, %v", line, err)
	}
	close(release) // only now may the upstream finish
	rest, err := io.ReadAll(br)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("rest = %q, %v", rest, err)
	}
	if r := wt.result(t); r != (usage.Result{Units: 12, Found: true, From: "sse", Complete: true}) {
		t.Errorf("result %+v, want 12 from the last event", r)
	}
	if out := <-wt.observed; !inbound(out) {
		t.Error("resp.Request does not carry the inbound request's context values")
	}
}

// inbound reports whether r's context is (derived from) the one the front
// server gave the inbound request: net/http puts the local address in it.
func inbound(r *http.Request) bool {
	return r.Context().Value(http.LocalAddrContextKey) != nil
}

// TestObserveTrailer: a usage in a trailer is read after the body, and the
// client still receives the trailer.
func TestObserveTrailer(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Usage")
		io.WriteString(w, "some export rows\n")
		http.NewResponseController(w).Flush()
		w.Header().Set("X-Usage", "250")
	}))
	defer up.Close()
	wt, opt := newWatcher(usage.Source{Header: "X-Usage"})
	f := newFixture(t, up.URL, time.Minute, nil, opt)
	resp, err := http.Get(f.front.URL + "/export")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(body) != "some export rows\n" {
		t.Fatalf("body %q, %v", body, err)
	}
	if got := resp.Trailer.Get("X-Usage"); got != "250" {
		t.Errorf("client trailer X-Usage = %q, want 250", got)
	}
	if r := wt.result(t); r != (usage.Result{Units: 250, Found: true, From: "trailer", Complete: true}) {
		t.Errorf("result %+v, want 250 from the trailer", r)
	}
}

// TestObserveJSON: a JSON body with a Content-Length is read to its end
// and its usage found.
func TestObserveJSON(t *testing.T) {
	const body = `{"id":"x","usage":{"prompt_tokens":4,"total_tokens":9}}`
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		io.WriteString(w, body)
	}))
	defer up.Close()
	wt, opt := newWatcher(usage.Source{Header: "X-Usage", JSON: "usage.total_tokens"})
	f := newFixture(t, up.URL, time.Minute, nil, opt)
	if status, got := getStatus(t, f, "/v1/completions"); status != http.StatusOK || got != body {
		t.Fatalf("got %d %q", status, got)
	}
	if r := wt.result(t); r != (usage.Result{Units: 9, Found: true, From: "json", Complete: true}) {
		t.Errorf("result %+v, want 9 from the body", r)
	}
}

// TestObserveClientGone: the client leaves mid-stream; done is called
// once, with Complete false.
func TestObserveClientGone(t *testing.T) {
	upGone := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(upGone)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"usage\":{\"total_tokens\":3}}\n\n")
		http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(waitFor):
		}
	}))
	defer up.Close()
	wt, opt := newWatcher(usage.Source{SSE: "usage.total_tokens"})
	f := newFixture(t, up.URL, time.Minute, nil, opt)

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", f.front.URL+"/v1/chat", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(resp.Body).ReadString('\n'); !strings.HasPrefix(line, "data:") {
		t.Fatalf("first event = %q", line)
	}
	cancel()
	resp.Body.Close()
	r := wt.result(t)
	if r.Complete {
		t.Errorf("result %+v, want Complete false", r)
	}
	if r.Found && (r.Units != 3 || r.From != "sse") {
		t.Errorf("result %+v: a usage other than the event received", r)
	}
	f.waitServed(t)
	select {
	case r := <-wt.results:
		t.Errorf("done called again: %+v", r)
	default:
	}
	<-upGone
}

// TestObserveSkips101: an upgraded connection is never shown to
// ObserveResponse; an ordinary response on the same route is.
func TestObserveSkips101(t *testing.T) {
	up := upgradetest.NewUpstream(t)
	wt, opt := newWatcher(usage.Source{Header: "X-Usage"})
	f := newFixture(t, up.URL, 0, nil, opt, func(o *testOptions) {
		o.AllowUpgrade = func(*http.Request) bool { return true }
	})
	resp, _ := upgradetest.Dial(t, f.front.URL).Send("GET /101-websocket HTTP/1.1\r\nHost: x\r\n" + upgradetest.WebSocket + "\r\n")
	if resp == nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v, want 101", resp)
	}
	if status, _ := getStatus(t, f, "/plain"); status != http.StatusOK {
		t.Fatalf("plain request: %d", status)
	}
	wt.result(t) // the plain response
	if n := len(wt.observed); n != 1 {
		t.Errorf("%d responses observed, want 1 (not the 101)", n)
	}
}

// waitArrival waits until the upstream signals that a request arrived.
func waitArrival(t *testing.T, arrived <-chan struct{}) {
	t.Helper()
	select {
	case <-arrived:
	case <-time.After(waitFor):
		proctest.FatalOverrun(t, "the request did not reach the upstream within %v", waitFor)
	}
}

// failure is one OnFailure call.
type failure struct {
	status  int // negative when the request lost the inbound context
	written bool
}

// failures records OnFailure calls.
type failures struct {
	mu    sync.Mutex
	calls []failure
}

func (fl *failures) add(r *http.Request, status int, written bool) {
	if !inbound(r) {
		status = -status // the request lost the inbound context
	}
	fl.mu.Lock()
	fl.calls = append(fl.calls, failure{status, written})
	fl.mu.Unlock()
}

func (fl *failures) get() []failure {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return append([]failure(nil), fl.calls...)
}

// TestOnFailure: OnFailure is called once for each answer the proxy gives
// itself because the upstream did not serve the request (502, the open
// breaker's 503, 504, the shedder's 503), not for a served response, and
// ObserveResponse never sees those requests. written is true only for the
// 504, whose upstream had the request. (TestClientGoneIs499: not for a
// client that left; TestOnFailureWritten: more on written.)
func TestOnFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	setup := func(raw string, after afterFunc, more ...func(*testOptions)) (*fixture, *failures, *watcher) {
		fl := &failures{}
		wt, opt := newWatcher(usage.Source{})
		opts := append([]func(*testOptions){opt, func(o *testOptions) { o.OnFailure = fl.add }}, more...)
		f := newFixture(t, raw, time.Minute, after, opts...)
		return f, fl, wt
	}
	wantFailures := func(name string, fl *failures, wt *watcher, want ...failure) {
		t.Helper()
		if got := fl.get(); !slices.Equal(got, want) {
			t.Errorf("%s: OnFailure statuses %v, want %v", name, got, want)
		}
		if n := len(wt.observed); n != 0 {
			t.Errorf("%s: %d responses observed, want none", name, n)
		}
	}

	t.Run("502 then breaker 503", func(t *testing.T) {
		b, err := NewBreaker(BreakerOptions{Failures: 1, Cooldown: time.Hour, Now: newFakeClock().Now})
		if err != nil {
			t.Fatal(err)
		}
		f, fl, wt := setup(dead, nil, func(o *testOptions) { o.Breaker = b })
		if status, _ := getStatus(t, f, "/x"); status != http.StatusBadGateway {
			t.Fatalf("got %d, want 502", status)
		}
		wantFailures("502", fl, wt, failure{http.StatusBadGateway, false})
		if status, _ := getStatus(t, f, "/x"); status != http.StatusServiceUnavailable {
			t.Fatalf("got %d, want 503 from the open breaker", status)
		}
		wantFailures("503", fl, wt, failure{http.StatusBadGateway, false}, failure{http.StatusServiceUnavailable, false})
	})

	t.Run("504", func(t *testing.T) {
		up, arrived := hangingUpstream(t)
		clock := &manualTimer{}
		f, fl, wt := setup(up.URL, clock.after)
		got := make(chan int, 1)
		go func() {
			status, _ := getStatus(t, f, "/x")
			got <- status
		}()
		waitArrival(t, arrived)
		clock.fire()
		if status := <-got; status != http.StatusGatewayTimeout {
			t.Fatalf("got %d, want 504", status)
		}
		wantFailures("504", fl, wt, failure{http.StatusGatewayTimeout, true})
	})

	t.Run("shed 503", func(t *testing.T) {
		gate := make(chan struct{})
		arrived := make(chan struct{}, 1)
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			arrived <- struct{}{}
			select {
			case <-gate:
			case <-time.After(waitFor):
			}
		}))
		defer up.Close()
		s, err := NewShedder(ShedderOptions{TargetLatency: time.Hour, MinInflight: 1, MaxInflight: 1})
		if err != nil {
			t.Fatal(err)
		}
		f, fl, wt := setup(up.URL, nil, func(o *testOptions) { o.Shedder = s })
		held := make(chan int, 1)
		go func() {
			status, _ := getStatus(t, f, "/held")
			held <- status
		}()
		waitArrival(t, arrived)
		if status, _ := getStatus(t, f, "/x"); status != http.StatusServiceUnavailable {
			t.Fatalf("got %d, want 503 from the shedder", status)
		}
		wantFailures("shed", fl, wt, failure{http.StatusServiceUnavailable, false})
		close(gate)
		if status := <-held; status != http.StatusOK {
			t.Errorf("held request: %d", status)
		}
		if got := fl.get(); len(got) != 1 {
			t.Errorf("OnFailure after a served request: %v", got)
		}
	})
}
