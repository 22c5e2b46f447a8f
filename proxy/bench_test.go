package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"
)

// BenchmarkProxySmall forwards a small GET to a local upstream over real
// loopback connections, calling the handler directly (no front server).
func BenchmarkProxySmall(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	transport := NewTransport(TransportOptions{})
	defer transport.CloseIdleConnections()
	for _, c := range []struct {
		name    string
		timeout time.Duration
	}{{"no-timeout", 0}, {"timeout", 10 * time.Second}} {
		h, err := New(Upstream{Name: "bench", URL: u, Timeout: c.timeout}, Options{Transport: transport})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req := httptest.NewRequest("GET", "/v1/transfers/1", nil)
					req.Header.Set("X-Request-ID", "bench")
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK {
						b.Errorf("status %d", rec.Code)
						return
					}
				}
			})
		})
	}
}

func BenchmarkEcho(b *testing.B) {
	h, err := New(Upstream{URL: &url.URL{Scheme: "echo"}}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/v1/transfers/1", nil)
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
}
