// Package gateway is quotagate's HTTP pipeline: for each request it
// authenticates the caller, matches the route, applies the per-instance local
// stage and the fleet-wide global stage, and then forwards the request or
// answers it with a problem+json error. It also serves the admin endpoints and
// swaps configurations on reload.
package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/proxy"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/telemetry"
)

// Backend is the global (stage 2) store of a gateway together with what the
// admin server needs to know about it.
type Backend struct {
	// Store decides; it is already wrapped in a circuit breaker where one is wanted.
	Store ratelimit.Store
	// Ping reports whether the store answers; nil means it always does.
	Ping func(ctx context.Context) error
	// BreakerState reports 0 closed, 1 half-open, 2 open (the worst over the
	// store's failure domains); nil means always 0.
	BreakerState func() int64
	// AllDown reports whether no decision can reach the store at all (every
	// failure domain's breaker is open); nil means never.
	AllDown func() bool
	// RetryAfter is what a 503 caused by this store advertises in
	// Retry-After: about the time until the store is probed again.
	RetryAfter time.Duration
}

// OpenStore builds the backend for a store configuration. It is called at
// start and on every reload whose store section changed.
type OpenStore func(cfg config.Store) (*Backend, error)

// Options are the parts of a Gateway that do not come from the config file.
// Nil fields take the documented defaults.
type Options struct {
	// OpenStore builds stage 2; nil = an in-process memory store.
	OpenStore OpenStore
	// Now is the clock of the local stage, the fallback share and JWT
	// checks; nil = time.Now.
	Now func() time.Time
	// Logger receives request and operational logs; nil = discard.
	Logger *slog.Logger
	// Metrics records decisions and requests; nil = not recorded.
	Metrics *telemetry.Metrics
	// TracerProvider creates the request and stage spans; nil = no tracing.
	TracerProvider trace.TracerProvider
	// Propagator extracts the caller's trace context and injects ours
	// upstream; nil = none.
	Propagator propagation.TextMapPropagator
	// Getenv reads secrets named by the config (JWT secret); nil = os.LookupEnv.
	Getenv func(string) (string, bool)
	// Transport carries requests to upstreams; nil = proxy.NewTransport defaults.
	Transport http.RoundTripper
}

// Gateway is a running configuration of the pipeline. It is an http.Handler
// for the public listener; Admin returns the handler of the admin listener.
// Reload swaps the configuration atomically. Safe for concurrent use.
type Gateway struct {
	opts     Options
	tracer   trace.Tracer
	live     atomic.Pointer[pipeline]
	fallback *ratelimit.MemoryStore // this instance's share when the store fails
	logLimit *telemetry.LogLimiter
	tracing  bool // a TracerProvider was given
	hot      *ratelimit.HotKeys

	admin         atomic.Pointer[adminAccess] // the protected admin endpoints' guard, per configuration
	adminLoopback atomic.Bool                 // the admin listener Serve runs on is loopback-only

	lastReload  atomic.Pointer[reloadRecord] // nil until a reload was attempted
	configSince atomic.Pointer[time.Time]    // when the live configuration was loaded

	mu        sync.Mutex // serializes reloads
	storeCfg  config.Store
	denials   atomic.Uint64
	closeOnce sync.Once
}

// New builds a gateway for cfg, which must have passed Validate.
func New(cfg *config.Config, o Options) (*Gateway, error) {
	tracing := o.TracerProvider != nil
	o.fill()
	g := &Gateway{
		tracing:  tracing,
		hot:      ratelimit.NewHotKeys(ratelimit.HotKeysOptions{}),
		opts:     o,
		tracer:   o.TracerProvider.Tracer("github.com/quotagate/quotagate/gateway"),
		fallback: ratelimit.NewMemoryStore(ratelimit.MemoryOptions{Now: o.Now}),
		logLimit: telemetry.NewLogLimiter(5, 10*time.Second, o.Now),
	}
	admin, err := newAdminAccess(cfg, o.Getenv)
	if err != nil {
		return nil, err
	}
	g.admin.Store(admin)
	backend, err := o.OpenStore(cfg.Store)
	if err != nil {
		return nil, err
	}
	p, err := g.build(cfg, nil, backend)
	if err != nil {
		_ = backend.Store.Close()
		return nil, err
	}
	g.storeCfg = cfg.Store
	g.live.Store(p)
	since := o.Now()
	g.configSince.Store(&since)
	o.Metrics.Prime(metricSeries(cfg))
	g.checkStore(cfg, backend)
	if o.Metrics != nil {
		err := o.Metrics.ObserveGauges(
			func() int64 {
				if f := g.live.Load().backend.BreakerState; f != nil {
					return f()
				}
				return 0
			},
			func() int64 {
				var n int64
				for _, s := range g.live.Load().tiers {
					n += int64(s.Len())
				}
				return n
			})
		if err != nil {
			return nil, err
		}
		err = o.Metrics.ObserveHotKeys(func() []float64 {
			top := g.hot.Top(telemetry.MaxHotKeyRanks)
			rates := make([]float64, len(top))
			for i, k := range top {
				rates[i] = k.PerSecond
			}
			return rates
		})
		if err != nil {
			return nil, err
		}
	}
	return g, nil
}

// fill sets the defaults of unset options.
func (o *Options) fill() {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Getenv == nil {
		o.Getenv = os.LookupEnv
	}
	if o.Propagator == nil {
		o.Propagator = propagation.NewCompositeTextMapPropagator()
	}
	if o.Transport == nil {
		o.Transport = proxy.NewTransport(proxy.TransportOptions{})
	}
	if o.TracerProvider == nil {
		o.TracerProvider = noop.NewTracerProvider()
	} else {
		// The upstream call gets a client span, and the upstream our trace
		// context (same trace id as the caller's).
		o.Transport = &tracingTransport{next: o.Transport, propagator: o.Propagator,
			tracer: o.TracerProvider.Tracer("github.com/quotagate/quotagate/gateway")}
	}
	if o.OpenStore == nil {
		o.OpenStore = func(config.Store) (*Backend, error) {
			return &Backend{Store: ratelimit.NewMemoryStore(ratelimit.MemoryOptions{Now: o.Now})}, nil
		}
	}
}

// build compiles cfg into a pipeline with its handler chain.
func (g *Gateway) build(cfg *config.Config, prev *pipeline, backend *Backend) (*pipeline, error) {
	p, err := buildPipeline(cfg, prev, backend, &g.opts)
	if err != nil {
		return nil, err
	}
	p.handler = chi.Chain(
		g.begin(p),
		g.authenticate(p),
		g.matchRoute(p),
		g.localStage(p),
		g.globalStage(p),
	).Handler(g.forward())
	return p, nil
}

// ServeHTTP runs the request through the live pipeline.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.live.Load().handler.ServeHTTP(w, r)
}

// Config returns the live configuration. Callers must not modify it.
func (g *Gateway) Config() *config.Config { return g.live.Load().cfg }

// Reload replaces the live configuration with cfg, which must have passed
// Validate. The new pipeline is built completely before it is swapped in, so
// requests see either the old or the new configuration, never a mix; on error
// the old one stays. The store is reopened only when its section changed;
// the old store is closed after grace, once in-flight requests are done with it.
func (g *Gateway) Reload(cfg *config.Config, grace time.Duration) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	admin, err := newAdminAccess(cfg, g.opts.Getenv)
	if err != nil {
		g.reloaded(false)
		return err
	}
	old := g.live.Load()
	backend := old.backend
	storeChanged := !reflect.DeepEqual(cfg.Store, g.storeCfg)
	if storeChanged {
		b, err := g.opts.OpenStore(cfg.Store)
		if err != nil {
			g.reloaded(false)
			return err
		}
		backend = b
	}
	p, err := g.build(cfg, old, backend)
	if err != nil {
		if storeChanged {
			_ = backend.Store.Close()
		}
		g.reloaded(false)
		return err
	}
	g.live.Store(p)
	g.admin.Store(admin)
	g.opts.Metrics.Prime(metricSeries(cfg))
	if storeChanged {
		g.storeCfg = cfg.Store
		oldStore := old.backend.Store
		time.AfterFunc(grace, func() { _ = oldStore.Close() })
	}
	g.reloaded(true)
	g.checkStore(cfg, backend)
	return nil
}

// RejectReload records a reload that failed before a configuration could be
// built (for example, a file that does not validate).
func (g *Gateway) RejectReload() {
	g.reloaded(false)
}

func (g *Gateway) reloaded(ok bool) {
	now := g.opts.Now()
	g.lastReload.Store(&reloadRecord{ok: ok, at: now})
	if ok {
		g.configSince.Store(&now)
	}
	if g.opts.Metrics != nil {
		g.opts.Metrics.ConfigReload(context.Background(), ok)
	}
}

// Close releases the store and the fallback store.
func (g *Gateway) Close() error {
	var err error
	g.closeOnce.Do(func() {
		err = errors.Join(g.live.Load().backend.Store.Close(), g.fallback.Close())
	})
	return err
}

// forward is the last stage: it hands the request to the route's upstream
// and records how long the upstream took.
func (g *Gateway) forward() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := stateFrom(r.Context())
		start := time.Now()
		st.route.proxy.ServeHTTP(w, r)
		// A switched protocol returns when its tunnel closes: that is the
		// tunnel's life, not the upstream's answer time.
		if m := g.opts.Metrics; m != nil && st.rec.status != http.StatusSwitchingProtocols {
			m.UpstreamDuration(r.Context(), st.route.name, time.Since(start))
		}
	})
}
