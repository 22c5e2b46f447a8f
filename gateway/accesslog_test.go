package gateway

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/proxy"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/telemetry"
)

// echoGateway is the benchmark's configuration (one key, echo upstream)
// with the options given.
func echoGateway(t testing.TB, o Options) *Gateway {
	t.Helper()
	keys := "    - {key_sha256: " + sha256Hex("bench-key-0") + ", tenant: t0, tier: free}\n"
	cfg, err := config.Parse([]byte(strings.Replace(benchConfig, "KEYS\n", keys, 1)), testGetenv)
	if err != nil {
		t.Fatal(err)
	}
	o.Transport = proxy.NewTransport(proxy.TransportOptions{})
	o.OpenStore = func(c config.Store) (*stack.Stack, error) {
		return stack.New(nil, stack.Options{FleetSize: c.FleetSize}), nil
	}
	gw, err := New(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	return gw
}

// TestAccessLogLine: the access line written through a LogSink's access
// writer has the documented fields in the documented order, and is the
// line Logger writes when AccessLog is nil.
func TestAccessLogLine(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { return at }
	send := func(gw *Gateway) {
		r := httptest.NewRequest(http.MethodPost, "/v1/transfers/42", strings.NewReader("hello"))
		r.Header.Set("Authorization", "Bearer bench-key-0")
		r.Header.Set("X-Request-Id", "req-abc-1")
		w := httptest.NewRecorder()
		gw.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	var viaLogger bytes.Buffer
	send(echoGateway(t, Options{Now: now, Logger: telemetry.NewLogger(&viaLogger, slog.LevelInfo)}))

	var viaSink lockedBuffer
	sink := telemetry.NewLogSink(&viaSink, 16)
	send(echoGateway(t, Options{Now: now, Logger: telemetry.NewLogger(io.Discard, slog.LevelInfo),
		AccessLog: telemetry.NewLogger(sink.Access(), slog.LevelInfo)}))
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}

	requestLine := func(out string) string {
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, `"msg":"request"`) {
				return l[strings.Index(l, `"level"`):] // the time is the wall clock's
			}
		}
		t.Fatalf("no request line in %q", out)
		return ""
	}
	want, got := requestLine(viaLogger.String()), requestLine(viaSink.String())
	if got != want {
		t.Errorf("access line differs:\n got %s\nwant %s", got, want)
	}
	form := regexp.MustCompile(`^"level":"INFO","msg":"request","request_id":"req-abc-1","method":"POST","route":"transfers.create","status":200,"caller":"[^"]*","bytes":\d+,"duration":"0s"}$`)
	if !form.MatchString(got) {
		t.Errorf("access line %s, want the documented fields in order", got)
	}
	if d := sink.Drops(); d != (telemetry.LogDrops{}) {
		t.Errorf("drops %+v, want none", d)
	}
}

// BenchmarkPipelineAccessLog is BenchmarkPipeline's admitted path with the
// access line written at info level, by Logger to io.Discard (slog) and by
// a LogSink's access writer to io.Discard (async):
// go test -run '^$' -bench 'PipelineAccessLog' -benchmem ./gateway
func BenchmarkPipelineAccessLog(b *testing.B) {
	for _, name := range []string{"slog", "async"} {
		b.Run("tenants=1/log="+name, func(b *testing.B) {
			gw := benchGateway(b, 1, func(o *Options) {
				o.Logger = telemetry.NewLogger(io.Discard, slog.LevelInfo)
				if name == "async" {
					sink := telemetry.NewLogSink(io.Discard, 0)
					b.Cleanup(func() { _ = sink.Close() })
					o.AccessLog = telemetry.NewLogger(sink.Access(), slog.LevelInfo)
				}
			})
			benchAdmitted(b, gw)
		})
	}
}

// benchAdmitted sends the benchmark's admitted request with key 0 through
// gw, in parallel, b.N times.
func benchAdmitted(b *testing.B, gw *Gateway) {
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if code := admitOnce(gw); code != http.StatusOK {
				// Not Fatalf: this is not the benchmark's goroutine.
				b.Errorf("status %d", code)
				return
			}
		}
	})
}

// admitOnce sends the benchmark's admitted request with key 0 through gw
// and returns the status it was answered.
func admitOnce(gw *Gateway) int {
	r := httptest.NewRequest("POST", "/v1/transfers/42", nil)
	r.Header.Set("Authorization", "Bearer bench-key-0")
	w := &discardWriter{h: http.Header{}}
	gw.ServeHTTP(w, r)
	return w.code
}
