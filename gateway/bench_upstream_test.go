package gateway

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/proxy"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/telemetry"
)

// BenchmarkPipelineUpstream is one admitted request as quotagate serve
// handles it, less the front server's read and write: metrics, the
// asynchronous access line at info level (to io.Discard), the default
// sampler with nothing exported, the memory store, and a real upstream
// over loopback through the shared Transport. Its allocs/op and B/op are
// the gateway's own per-request allocations plus the forwarder's and
// the Transport's:
// go test -run '^$' -bench PipelineUpstream -benchmem ./gateway
//
// The redis case is the same request deciding on a real redis-server
// through the stack cmd/quotagate opens (coalescer, breaker, leases,
// fallback); the difference between the two is the gateway's own cost of
// a Redis decision (allocs/op, or instructions under callgrind with
// QG_BENCH_REDIS set).
func BenchmarkPipelineUpstream(b *testing.B) {
	b.Run("memory", func(b *testing.B) {
		benchPipelineUpstream(b, func(c config.Store) (*stack.Stack, error) {
			return stack.New(nil, stack.Options{FleetSize: c.FleetSize}), nil
		})
	})
	b.Run("redis", func(b *testing.B) {
		// QG_BENCH_REDIS names a running redis-server to use instead of
		// starting one: under valgrind, which cannot follow the child.
		addr := os.Getenv("QG_BENCH_REDIS")
		if addr == "" {
			addr = redistest.StartStandalone(b).Addr
		}
		benchPipelineUpstream(b, func(c config.Store) (*stack.Stack, error) {
			c.Redis.Addrs, c.Redis.Timeout = []string{addr}, time.Second
			return openRedisStack(c, "", nil), nil
		})
	})
}

func benchPipelineUpstream(b *testing.B, open func(config.Store) (*stack.Stack, error)) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	}))
	b.Cleanup(up.Close)
	conf := strings.Replace(benchConfig, `upstreams: {echo: {url: "echo:"}}`,
		`upstreams: {echo: {url: "`+up.URL+`", timeout: 10s}}`, 1)
	cfg, err := config.Parse([]byte(strings.Replace(conf, "KEYS\n",
		"    - {key_sha256: "+sha256Hex("bench-key-0")+", tenant: t0, tier: free}\n", 1)), testGetenv)
	if err != nil {
		b.Fatal(err)
	}
	tel, m := newTestMetrics(b)
	logOut := telemetry.NewLogSink(io.Discard, 0)
	b.Cleanup(func() { _ = logOut.Close() })
	transport := proxy.NewTransport(proxy.TransportOptions{})
	b.Cleanup(transport.CloseIdleConnections)
	gw, err := New(cfg, Options{
		Transport:      transport,
		Logger:         telemetry.NewLogger(io.Discard, slog.LevelInfo),
		AccessLog:      telemetry.NewLogger(logOut.Access(), slog.LevelInfo),
		Metrics:        m,
		TracerProvider: tel.TracerProvider,
		Propagator:     tel.Propagator,
		OpenStore:      open,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = gw.Close() })
	benchAdmitted(b, gw)
}

// TestAdmittedRequestAllocs guards the admitted path's allocations (the
// built-in echo upstream, so no network): 30 per request when this was
// written, including the test's own request. The bound is generous; a
// change that crosses it adds work to every request and should say so in
// BENCHMARKS.md.
func TestAdmittedRequestAllocs(t *testing.T) {
	gw := benchGateway(t, 1)
	n := testing.AllocsPerRun(200, func() {
		if code := admitOnce(gw); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
	})
	t.Logf("%v allocations per admitted request", n)
	if n > 40 {
		t.Errorf("%v allocations per admitted request, want at most 40", n)
	}
}
