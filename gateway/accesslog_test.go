package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
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

// TestAccessLogSameLineAsLogger: with Options.AccessLog the access line
// has the fields, values and order Logger would have written.
func TestAccessLogSameLineAsLogger(t *testing.T) {
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
	var viaSlog bytes.Buffer
	send(echoGateway(t, Options{Now: now, Logger: telemetry.NewLogger(&viaSlog, slog.LevelInfo)}))

	var viaAccess lockedBuffer
	aw := telemetry.NewAsyncWriter(&viaAccess, 16)
	send(echoGateway(t, Options{Now: now, Logger: telemetry.NewLogger(io.Discard, slog.LevelInfo),
		AccessLog: telemetry.NewAccessLog(aw, slog.LevelInfo)}))
	if err := aw.Close(); err != nil {
		t.Fatal(err)
	}

	requestLine := func(out string) string {
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, `"msg":"request"`) {
				// Logger stamps the record with the wall clock, AccessLog
				// with Options.Now: compare everything after the time.
				return l[strings.Index(l, `"level"`):]
			}
		}
		t.Fatalf("no request line in %q", out)
		return ""
	}
	want, got := requestLine(viaSlog.String()), requestLine(viaAccess.String())
	if got != want {
		t.Errorf("access line differs:\n got %s\nwant %s", got, want)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte("{"+got), &v); err != nil || v["request_id"] != "req-abc-1" || v["status"] != 200.0 {
		t.Errorf("line %s: %v %v", got, v, err)
	}
}

// BenchmarkPipelineAccessLog is BenchmarkPipeline's admitted path with the
// access line written at info level, by Logger (slog's JSON handler,
// synchronous) and by AccessLog (hand encoding, asynchronous), both to
// io.Discard:
// go test -run '^$' -bench 'Pipeline/tenants=1$' -benchmem ./gateway
func BenchmarkPipelineAccessLog(b *testing.B) {
	for _, name := range []string{"slog", "async"} {
		b.Run("tenants=1/log="+name, func(b *testing.B) {
			gw := benchGateway(b, 1, func(o *Options) {
				o.Logger = telemetry.NewLogger(io.Discard, slog.LevelInfo)
				if name == "async" {
					w := telemetry.NewAsyncWriter(io.Discard, 0)
					b.Cleanup(func() { _ = w.Close() })
					o.AccessLog = telemetry.NewAccessLog(w, slog.LevelInfo)
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
