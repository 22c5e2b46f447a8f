package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/benchloop"
	"github.com/quotagate/quotagate/usage"
)

// BenchmarkProxySmall forwards a small GET to a local upstream over real
// loopback connections, calling the handler directly (no front server),
// as a direct exchange and through net/http's Transport (std/,
// server.upstream_exchanges: standard).
// watch-write finds out whether the request was written (WatchWrite
// selects it): its allocs/op over no-timeout's are that cost. cpu-µs/op
// is the process's CPU time (the upstream's included) per request.
func BenchmarkProxySmall(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	onFailure := func(*http.Request, int, bool) {}
	for _, tr := range []struct {
		prefix string
		opts   TransportOptions
	}{{"", TransportOptions{}}, {"std/", TransportOptions{NoDirect: true}}} {
		transport := NewTransport(tr.opts)
		defer transport.CloseIdleConnections()
		for _, c := range []struct {
			name      string
			timeout   time.Duration
			onFailure func(*http.Request, int, bool)
		}{{"no-timeout", 0, nil}, {"timeout", 10 * time.Second, nil}, {"watch-write", 0, onFailure},
			{"timeout+watch-write", 10 * time.Second, onFailure}} {
			h, err := New(Upstream{Name: "bench", URL: u, Timeout: c.timeout}, Options{Transport: transport, Observer: &hooks{OnFailure: c.onFailure}})
			if err != nil {
				b.Fatal(err)
			}
			b.Run(tr.prefix+c.name, func(b *testing.B) {
				b.ReportAllocs()
				cpu0, ok0 := benchloop.ProcessCPU()
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
				if cpu1, ok := benchloop.ProcessCPU(); ok && ok0 {
					b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
				}
			})
		}
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

// BenchmarkGuards: what the breaker and the shedder add to each request
// (admission and the outcome), across goroutines.
func BenchmarkGuards(b *testing.B) {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	b.Run("breaker", func(b *testing.B) {
		br, _ := NewBreaker(BreakerOptions{Failures: 5, Cooldown: time.Second, Now: clock})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				probe, _, _ := br.admit()
				br.done(probe, outcomeSuccess)
			}
		})
	})
	b.Run("shedder", func(b *testing.B) {
		s, _ := NewShedder(ShedderOptions{TargetLatency: time.Second, Priority: []string{"a", "b"}, MinInflight: 1, MaxInflight: 1 << 20, Now: clock})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if s.admit("b") {
					s.done(time.Millisecond, true)
				}
			}
		})
	})
}

// BenchmarkObserveSSE: what reading the usage of a 1,000-event stream
// (about 100 KiB) as it passes adds to forwarding it over loopback.
func BenchmarkObserveSSE(b *testing.B) {
	var s strings.Builder
	for i := range 1000 {
		s.WriteString(`data: {"id":"c1","choices":[{"delta":{"content":"token ` + strconv.Itoa(i) + `"}}],"usage":null}` + "\n\n")
	}
	s.WriteString(`data: {"choices":[],"usage":{"total_tokens":1010}}` + "\n\ndata: [DONE]\n\n")
	stream := s.String()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, stream)
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	transport := NewTransport(TransportOptions{})
	defer transport.CloseIdleConnections()
	var found atomic.Int64
	watch := func(resp *http.Response) {
		usage.Watch(resp, usage.Source{SSE: "usage.total_tokens"}, 0, func(r usage.Result) {
			if r.Found && r.Units == 1010 {
				found.Add(1)
			}
		})
	}
	for _, c := range []struct {
		name    string
		observe func(*http.Response)
	}{{"plain", nil}, {"watch", watch}} {
		h, err := New(Upstream{Name: "bench", URL: u}, Options{Transport: transport, Observer: &hooks{ObserveResponse: c.observe}})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			found.Store(0)
			b.SetBytes(int64(len(stream)))
			b.ReportAllocs()
			cpu0, ok0 := benchloop.ProcessCPU()
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/chat", nil))
				if rec.Code != http.StatusOK || rec.Body.Len() != len(stream) {
					b.Fatalf("status %d, %d bytes", rec.Code, rec.Body.Len())
				}
			}
			if cpu1, ok := benchloop.ProcessCPU(); ok && ok0 {
				b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			}
			if c.observe != nil && found.Load() != int64(b.N) {
				b.Fatalf("usage found %d times in %d requests", found.Load(), b.N)
			}
		})
	}
}
