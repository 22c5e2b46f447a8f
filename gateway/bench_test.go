package gateway

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/proxy"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/telemetry"
)

// benchConfig limits generously so the benchmark measures the admitted
// path: identity, route, local stage, global stage, proxy (built-in echo
// upstream, so no network is measured).
const benchConfig = `
server: {listen: 127.0.0.1:0, admin_listen: 127.0.0.1:0}
identity:
  api_keys:
KEYS
tiers: {free: {local: {rate: 1000000000, per: 1s, burst: 1000000000}}}
policies:
  tenant: {limits: {"*": {rate: 1000000000, per: 1s, burst: 1000000000}}}
  transfers: {scope: tenant_route, limits: {"*": {rate: 1000000000, per: 1s, burst: 1000000000}}}
upstreams: {echo: {url: "echo:"}}
routes:
  - {name: transfers.create, method: POST, path: "/v1/transfers/{id}", upstream: echo, policies: [tenant, transfers]}
`

func benchGateway(b testing.TB, keys int, opts ...func(*Options)) *Gateway {
	b.Helper()
	var sb strings.Builder
	for i := 0; i < keys; i++ {
		sb.WriteString("    - {key_sha256: " + sha256Hex("bench-key-"+strconv.Itoa(i)) + ", tenant: t" + strconv.Itoa(i) + ", tier: free}\n")
	}
	cfg, err := config.Parse([]byte(strings.Replace(benchConfig, "KEYS\n", sb.String(), 1)), testGetenv)
	if err != nil {
		b.Fatal(err)
	}
	o := Options{Transport: proxy.NewTransport(proxy.TransportOptions{}),
		OpenStore: func(c config.Store) (*stack.Stack, error) {
			return stack.New(nil, stack.Options{FleetSize: c.FleetSize}), nil
		}}
	for _, f := range opts {
		f(&o)
	}
	gw, err := New(cfg, o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = gw.Close() })
	return gw
}

// discardWriter is a ResponseWriter that keeps nothing, so the benchmark
// measures the gateway, not a recorder.
type discardWriter struct {
	h    http.Header
	code int
}

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(c int)           { d.code = c }

// BenchmarkPipelineTracing is the same path with tracing off (no provider),
// with an SDK provider whose sampler drops every span, and with one that
// records every span (exported to nothing): what tracing costs per request.
// The telemetry_* cases use the provider quotagate serve runs with
// (telemetry.TracerProvider): the default sampler with nothing exported
// (ids made, nothing recorded), always_off, and the default sampler
// recording into an exporter-less SDK.
func BenchmarkPipelineTracing(b *testing.B) {
	tp := func(b *testing.B, env map[string]string, recorded bool) trace.TracerProvider {
		p, err := telemetry.NewTracerProvider(func(k string) string { return env[k] }, recorded)
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	cases := map[string]func(*Options){
		"none": func(*Options) {},
		"never": func(o *Options) {
			o.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
		},
		"always_on": func(o *Options) {
			o.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
		},
		"telemetry_default": func(o *Options) { o.TracerProvider = tp(b, nil, false) },
		"telemetry_always_off": func(o *Options) {
			o.TracerProvider = tp(b, map[string]string{"OTEL_TRACES_SAMPLER": "always_off"}, false)
		},
		"telemetry_recorded": func(o *Options) { o.TracerProvider = tp(b, nil, true) },
	}
	for _, name := range []string{"none", "never", "always_on", "telemetry_default", "telemetry_always_off", "telemetry_recorded"} {
		b.Run("tracer="+name, func(b *testing.B) {
			benchAdmitted(b, benchGateway(b, 1, cases[name]))
		})
	}
}

// BenchmarkPipeline is the whole per-request path on the memory store, one
// tenant and many tenants: go test -run '^$' -bench Pipeline -benchmem ./gateway
func BenchmarkPipeline(b *testing.B) {
	for _, tenants := range []int{1, 1000} {
		b.Run("tenants="+strconv.Itoa(tenants), func(b *testing.B) {
			gw := benchGateway(b, tenants)
			keys := make([]string, tenants)
			for i := range keys {
				keys[i] = "Bearer bench-key-" + strconv.Itoa(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					r := httptest.NewRequest("POST", "/v1/transfers/42", nil)
					r.Header.Set("Authorization", keys[i%len(keys)])
					w := &discardWriter{h: http.Header{}}
					gw.ServeHTTP(w, r)
					if w.code != http.StatusOK {
						b.Fatalf("status %d", w.code)
					}
					i++
				}
			})
		})
	}
}
