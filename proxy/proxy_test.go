package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestForwardedRequest checks what the upstream receives and what it does
// not.
func TestForwardedRequest(t *testing.T) {
	got := make(chan *http.Request, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Clone(r.Context())
		w.Header().Set("X-Upstream", "yes")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "created")
	}))
	defer up.Close()
	f := newFixture(t, up.URL+"/base?fixed=1", 0, nil)

	req, _ := http.NewRequest("POST", f.front.URL+"/v1/transfers/7?q=2", strings.NewReader("payload"))
	h := req.Header
	h.Set("Authorization", "Bearer secret-key")
	h.Set("X-API-Key", "secret-key")
	h.Set("Proxy-Authorization", "Basic c2VjcmV0")
	h.Set("Cookie", "session=abc")
	h.Set("X-Request-ID", "req-123")
	h.Set("X-Quotagate-Tenant", "acme")
	h.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	h.Set("Tracestate", "vendor=x")
	h.Set("X-Forwarded-For", "203.0.113.9") // the gateway keeps it only from trusted peers
	h.Set("X-Forwarded-Host", "spoofed.example")
	h.Set("X-Forwarded-Proto", "https")
	h.Set("Connection", "X-Hop")
	h.Set("X-Hop", "drop me")
	h.Set("Keep-Alive", "timeout=5")
	h.Set("Te", "gzip")
	h.Set("Accept-Encoding", "identity")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || string(body) != "created" || resp.Header.Get("X-Upstream") != "yes" {
		t.Fatalf("response %d %q %v, want the upstream's 201", resp.StatusCode, body, resp.Header)
	}
	r := <-got
	frontHost := strings.TrimPrefix(f.front.URL, "http://")
	upHost := strings.TrimPrefix(up.URL, "http://")
	for _, c := range []struct{ header, want string }{
		{"Authorization", ""},
		{"X-Api-Key", ""},
		{"Proxy-Authorization", ""},
		{"X-Hop", ""},
		{"Keep-Alive", ""},
		{"Te", ""},
		{"Cookie", "session=abc"},
		{"X-Request-Id", "req-123"},
		{"X-Quotagate-Tenant", "acme"},
		{"Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		{"Tracestate", "vendor=x"},
		{"X-Forwarded-For", "203.0.113.9, 127.0.0.1"},
		{"X-Forwarded-Host", frontHost},
		{"X-Forwarded-Proto", "http"},
		{"Accept-Encoding", "identity"},
	} {
		if v := strings.Join(r.Header.Values(c.header), ","); v != c.want {
			t.Errorf("upstream header %s = %q, want %q", c.header, v, c.want)
		}
	}
	if r.Host != upHost {
		t.Errorf("upstream Host = %q, want %q", r.Host, upHost)
	}
	if r.URL.Path != "/base/v1/transfers/7" || r.URL.RawQuery != "fixed=1&q=2" {
		t.Errorf("upstream URL = %q ? %q, want /base/v1/transfers/7 ? fixed=1&q=2", r.URL.Path, r.URL.RawQuery)
	}
	if len(f.errs.get()) != 0 {
		t.Errorf("WriteError called: %v", f.errs.get())
	}
}

// TestUpstream5xxPassesThrough checks that an upstream's own error is the
// client's answer, unchanged, and not a proxy failure.
func TestUpstream5xxPassesThrough(t *testing.T) {
	for _, status := range []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout} {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "7")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			io.WriteString(w, `{"upstream":"error"}`)
		}))
		f := newFixture(t, up.URL, time.Minute, nil)
		resp, err := http.Get(f.front.URL + "/x")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		up.Close()
		if resp.StatusCode != status || string(body) != `{"upstream":"error"}` ||
			resp.Header.Get("Retry-After") != "7" || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("upstream %d: client got %d %q %v", status, resp.StatusCode, body, resp.Header)
		}
		if calls := f.errs.get(); len(calls) != 0 {
			t.Errorf("upstream %d: WriteError called: %v", status, calls)
		}
	}
}

func TestEcho(t *testing.T) {
	h, err := New(Upstream{Name: "demo", URL: &url.URL{Scheme: "echo"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("DELETE", "/v1/transfers/9?x=1", nil)
	req.Header.Set("X-Request-ID", "r-1")
	req.Header.Set("X-Quotagate-Tenant", "acme")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("echo answered %d %v", rec.Code, rec.Header())
	}
	var got map[string]string
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("echo body %q: %v", rec.Body, err)
	}
	want := map[string]string{"method": "DELETE", "path": "/v1/transfers/9", "request_id": "r-1", "tenant": "acme"}
	if len(got) != len(want) {
		t.Errorf("echo body = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("echo %s = %q, want %q", k, got[k], v)
		}
	}
	// "echo:" as written in a config file parses to the same scheme.
	u, _ := url.Parse("echo:")
	if _, err := New(Upstream{URL: u}, Options{}); err != nil {
		t.Errorf("New(echo:) = %v", err)
	}
}

func TestNewRejectsInvalidUpstreams(t *testing.T) {
	mustParse := func(s string) *url.URL {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	tests := []struct {
		up      Upstream
		wantErr string
	}{
		{Upstream{Name: "a"}, "no URL"},
		{Upstream{Name: "a", URL: mustParse("ftp://x")}, "scheme \"ftp\""},
		{Upstream{Name: "a", URL: mustParse("localhost:9001")}, "scheme"},
		{Upstream{Name: "a", URL: mustParse("http:///path")}, "no host"},
		{Upstream{Name: "a", URL: mustParse("http:opaque")}, "no host"},
		{Upstream{Name: "a", URL: mustParse("http://u:p@x")}, "credentials"},
		{Upstream{Name: "a", URL: mustParse("http://x"), Timeout: -time.Second}, "negative timeout"},
	}
	for _, tt := range tests {
		h, err := New(tt.up, Options{})
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("New(%v) = %v, %v; want error containing %q", tt.up.URL, h, err, tt.wantErr)
		}
		if err != nil && strings.Contains(err.Error(), ":p@") {
			t.Errorf("error %v reveals a password", err)
		}
	}
}

func TestNewTransportDefaults(t *testing.T) {
	tr := NewTransport(TransportOptions{})
	if tr.Proxy != nil || !tr.ForceAttemptHTTP2 || !tr.DisableCompression || tr.ResponseHeaderTimeout != 0 ||
		tr.MaxIdleConnsPerHost != 256 || tr.MaxIdleConns != 1024 || tr.IdleConnTimeout != 90*time.Second ||
		tr.TLSHandshakeTimeout != 5*time.Second || tr.ExpectContinueTimeout != time.Second || tr.DialContext == nil {
		t.Errorf("unexpected defaults: %+v", tr)
	}
	tr = NewTransport(TransportOptions{MaxIdleConnsPerHost: 8, IdleConnTimeout: time.Second, MaxConnsPerHost: 3})
	if tr.MaxIdleConnsPerHost != 8 || tr.IdleConnTimeout != time.Second || tr.MaxConnsPerHost != 3 {
		t.Errorf("options not applied: %+v", tr)
	}
}

func TestDefaultWriteError(t *testing.T) {
	rec := httptest.NewRecorder()
	writePlainError(rec, nil, http.StatusBadGateway, CodeUnavailable, "the upstream service is unavailable")
	if rec.Code != 502 || !strings.Contains(rec.Body.String(), "unavailable") || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") {
		t.Errorf("502: %d %q %v", rec.Code, rec.Body, rec.Header())
	}
	rec = httptest.NewRecorder()
	writePlainError(rec, nil, StatusClientClosedRequest, CodeClientClosed, "gone")
	if rec.Code != 499 || rec.Body.Len() != 0 {
		t.Errorf("499: %d %q", rec.Code, rec.Body)
	}
}

func TestBufferPool(t *testing.T) {
	b := defaultBufferPool.Get()
	if len(b) != bufferSize {
		t.Fatalf("Get returned %d bytes, want %d", len(b), bufferSize)
	}
	defaultBufferPool.Put(b[:10])
	if b := defaultBufferPool.Get(); len(b) != bufferSize {
		t.Errorf("Get after Put of a resliced buffer returned %d bytes", len(b))
	}
	defaultBufferPool.Put(make([]byte, 10)) // too small: dropped, no panic
}

// A warm pool hands buffers back and forth without allocating: the pool
// keeps array pointers, not slices whose headers would be boxed on every
// Put. (The race detector makes sync.Pool drop a share of what is put,
// hence the bound below one rather than zero.)
func TestBufferPoolPutDoesNotAllocate(t *testing.T) {
	p := newBufferPool()
	p.Put(p.Get())
	if n := testing.AllocsPerRun(1000, func() { p.Put(p.Get()) }); n >= 1 {
		t.Errorf("%v allocations per Get and Put, want fewer than 1", n)
	}
	big := make([]byte, 2*bufferSize)
	p.Put(big)
	if b := p.Get(); len(b) != bufferSize {
		t.Errorf("Get after Put of a larger buffer returned %d bytes", len(b))
	}
}
