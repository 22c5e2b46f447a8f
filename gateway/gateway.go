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
	"github.com/quotagate/quotagate/ratelimit/hotkeys"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/telemetry"
	"github.com/quotagate/quotagate/usage"
)

// OpenStore builds the stage-2 decision stack for a store configuration
// (see stack.Stack). It is called at start and on every reload whose
// store section changed; the gateway owns the stack it returns.
type OpenStore func(cfg config.Store) (*stack.Stack, error)

// Options are the parts of a Gateway that do not come from the config file.
// Nil fields take the documented defaults.
type Options struct {
	// OpenStore builds stage 2; nil = an in-process memory stack
	// (stack.New) on Now.
	OpenStore OpenStore
	// Now is the clock of the local stage, JWT checks and concurrency
	// queues (and of the default memory stack); nil = time.Now. The clock of a stack that
	// OpenStore builds, its fallback shares included, is OpenStore's choice.
	Now func() time.Time
	// After is the timer of the concurrency queues' waits, on Now's clock;
	// nil = time.After.
	After func(time.Duration) <-chan time.Time
	// Logger receives request and operational logs; nil = discard.
	Logger *slog.Logger
	// AccessLog receives the access lines ("request"); nil = Logger. The
	// gateway's binary gives it the access writer of its LogSink, which
	// drops and counts a line rather than wait for stderr.
	AccessLog *slog.Logger
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
	logLimit *telemetry.LogLimiter
	tracing  bool // a TracerProvider was given
	hot      *hotkeys.Tracker
	slots    *slotState
	series   requestSeries // metric series that do not depend on the configuration
	history  *history      // the console's samples of the metrics, while Serve runs (see recordHistory)

	admin         atomic.Pointer[adminAccess] // the protected admin endpoints' guard, per configuration
	adminLoopback atomic.Bool                 // the admin listener Serve runs on is loopback-only

	lastReload  atomic.Pointer[reloadRecord] // nil until a reload was attempted
	configSince atomic.Pointer[time.Time]    // when the live configuration was loaded

	mu       sync.Mutex // serializes reloads and Close; guards what follows
	storeCfg config.Store
	// retiring holds the stacks replaced by a reload, each with the timer
	// that closes it after the grace period; Close closes them at once.
	retiring map[*stack.Stack]*time.Timer
	closed   bool
	timers   sync.WaitGroup // retire callbacks not yet finished
	// retiredDenials is the local denials of the stacks closed so far, so
	// that quotagate_local_denials_total survives a store reload.
	retiredDenials uint64
	denials        atomic.Uint64
	settling       sync.WaitGroup // settlement calls not yet finished
	// bodyBudget bounds the request body bytes held at once to find
	// reservations (server.body_buffer_bytes, read at start only).
	bodyBudget *usage.Budget
}

// New builds a gateway for cfg. It runs cfg.Normalize and cfg.Validate
// first and returns Validate's errors: a configuration built in code or
// edited after loading is put in the same form and held to the same rules
// as a file, and the compiled pipeline trusts them.
func New(cfg *config.Config, o Options) (*Gateway, error) {
	cfg.Normalize()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tracing := o.TracerProvider != nil
	o.fill()
	logLimit := telemetry.NewLogLimiter(5, 10*time.Second, o.Now)
	g := &Gateway{
		tracing:    tracing,
		hot:        hotkeys.New(hotkeys.Options{}),
		opts:       o,
		tracer:     o.TracerProvider.Tracer("github.com/quotagate/quotagate/gateway"),
		retiring:   map[*stack.Stack]*time.Timer{},
		logLimit:   logLimit,
		slots:      newSlotState(o.Logger, o.Metrics, logLimit),
		series:     newRequestSeries(o.Metrics),
		history:    newHistory(),
		bodyBudget: newBodyBudget(cfg.Server.BodyBufferBytes),
	}
	admin, err := newAdminAccess(cfg, o.Getenv)
	if err != nil {
		g.slots.close()
		return nil, err
	}
	g.admin.Store(admin)
	store, err := o.OpenStore(cfg.Store)
	if err != nil {
		g.slots.close()
		return nil, err
	}
	p, err := g.build(cfg, nil, store)
	if err != nil {
		g.slots.close()
		_ = store.Close()
		return nil, err
	}
	g.storeCfg = cfg.Store
	g.live.Store(p)
	since := o.Now()
	g.configSince.Store(&since)
	o.Metrics.Prime(metricSeries(cfg))
	g.checkStore(cfg, store)
	if o.Metrics != nil {
		err := o.Metrics.ObserveGauges(
			func() int64 { return breakerGauge(g.live.Load().store.Health().Breaker) },
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
		err = o.Metrics.ObserveUpstreamBreakers(func(yield func(string, int64)) {
			g.live.Load().breakerStates(yield)
		})
		if err != nil {
			return nil, err
		}
		err = o.Metrics.ObserveFleet(func() int64 { return g.live.Load().store.FleetSize() }, g.localDenials)
		if err != nil {
			return nil, err
		}
		err = o.Metrics.ObserveInflight(func(yield func(string, int64)) {
			for name, pol := range g.live.Load().cfg.Policies {
				if pol.Algorithm == ratelimit.Concurrency {
					yield(name, g.slots.inflightOf(name))
				}
			}
		})
		if err != nil {
			return nil, err
		}
		// The region's metrics follow the store of the current pipeline (a
		// reload may open a new one), and its policies.
		err = o.Metrics.ObserveRegion(func() (telemetry.RegionStats, bool) { return g.live.Load().regionMetrics() })
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
	if o.After == nil {
		o.After = time.After
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
		o.OpenStore = func(c config.Store) (*stack.Stack, error) {
			return stack.New(nil, stack.Options{Now: o.Now, FleetSize: c.FleetSize}), nil
		}
	}
}

// breakerGauge maps a breaker state to the value of the breaker gauge.
func breakerGauge(s stack.BreakerState) int64 {
	switch s {
	case stack.BreakerOpen:
		return telemetry.BreakerOpen
	case stack.BreakerHalfOpen:
		return telemetry.BreakerHalfOpen
	}
	return telemetry.BreakerClosed
}

// build compiles cfg into a pipeline with its handler chain.
func (g *Gateway) build(cfg *config.Config, prev *pipeline, store *stack.Stack) (*pipeline, error) {
	p, err := buildPipeline(cfg, prev, store, &g.opts, g)
	if err != nil {
		return nil, err
	}
	primeShed(g.opts.Metrics, cfg)
	g.opts.Metrics.PrimeSettlements(settledPolicies(cfg))
	p.handler = chi.Chain(
		g.begin(p),
		g.authenticate(p),
		g.quotaEndpoint(p),
		g.matchRoute(p),
		g.costStage(),
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

// Reload replaces the live configuration with cfg, after cfg.Normalize and
// cfg.Validate (whose errors it returns, keeping the live one). The new pipeline is built completely before it is swapped in, so
// requests see either the old or the new configuration, never a mix; on error
// the old one stays. The store is reopened only when its section changed;
// the old store is closed after grace, once in-flight requests are done with
// it, or by Close if that comes first. A closed gateway refuses to reload.
func (g *Gateway) Reload(cfg *config.Config, grace time.Duration) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return errors.New("gateway: reload after Close")
	}
	cfg.Normalize()
	if err := cfg.Validate(); err != nil {
		g.reloaded(false)
		return err
	}
	admin, err := newAdminAccess(cfg, g.opts.Getenv)
	if err != nil {
		g.reloaded(false)
		return err
	}
	old := g.live.Load()
	store := old.store
	storeChanged := !reflect.DeepEqual(cfg.Store, g.storeCfg)
	if storeChanged {
		s, err := g.opts.OpenStore(cfg.Store)
		if err != nil {
			g.reloaded(false)
			return err
		}
		store = s
	}
	p, err := g.build(cfg, old, store)
	if err != nil {
		if storeChanged {
			_ = store.Close()
		}
		g.reloaded(false)
		return err
	}
	g.live.Store(p)
	g.admin.Store(admin)
	g.opts.Metrics.Prime(metricSeries(cfg))
	if storeChanged {
		g.storeCfg = cfg.Store
		g.retire(old.store, grace)
	}
	g.reloaded(true)
	g.checkStore(cfg, store)
	return nil
}

// retire closes s after grace, unless Close closes it first. g.mu is held.
func (g *Gateway) retire(s *stack.Stack, grace time.Duration) {
	g.timers.Add(1)
	g.retiring[s] = time.AfterFunc(grace, func() {
		defer g.timers.Done()
		g.mu.Lock()
		_, ok := g.retiring[s]
		delete(g.retiring, s)
		if ok {
			g.retiredDenials += s.LocalDenials()
		}
		g.mu.Unlock()
		if ok {
			_ = s.Close()
		}
	})
}

// localDenials is the requests denied from a remembered store denial
// since the gateway started, over every stack it used.
func (g *Gateway) localDenials() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.retiredDenials
	for s := range g.retiring {
		n += s.LocalDenials()
	}
	return n + g.live.Load().store.LocalDenials()
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

// Close releases the live store and those that reloads replaced, without
// waiting for their grace periods; when it returns, no store is closed
// later. Calls after the first do nothing.
func (g *Gateway) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	retiring := g.retiring
	g.retiring = nil
	g.mu.Unlock()
	// Releases still in flight finish before their stores close.
	g.slots.close()

	g.settling.Wait() // they use the stores
	errs := []error{g.live.Load().store.Close()}
	for s, t := range retiring {
		if t.Stop() {
			g.timers.Done() // its callback will never run
		}
		errs = append(errs, s.Close())
	}
	g.timers.Wait()
	return errors.Join(errs...)
}

// forward is the last stage: it hands the request to the route's upstream
// and records how long the upstream took.
func (g *Gateway) forward() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := stateFrom(r.Context())
		if name := st.route.upstreamName; name != "" { // the candidate that admitted
			w.Header()["Quotagate-Upstream"] = []string{name}
			if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
				span.SetAttributes(telemetry.AttrUpstream.String(name))
			}
		}
		start := time.Now()
		st.route.proxy.ServeHTTP(w, r)
		// A switched protocol returns when its tunnel closes: that is the
		// tunnel's life, not the upstream's answer time.
		if m := g.opts.Metrics; m != nil && st.rec.status != http.StatusSwitchingProtocols {
			m.RecordUpstreamDuration(r.Context(), st.route.upstream, time.Since(start))
		}
	})
}
