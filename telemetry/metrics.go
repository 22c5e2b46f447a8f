package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Values of the result label of quotagate_decisions_total.
const (
	ResultAllowed      = "allowed"
	ResultDenied       = "denied"
	ResultShadowDenied = "shadow_denied"
	ResultError        = "error"
)

// Values of the mode label of quotagate_store_fallback_total.
const (
	FallbackOpen   = "open"
	FallbackClosed = "closed"
	FallbackLocal  = "local"
)

// Breaker states reported by quotagate_store_breaker_state.
const (
	BreakerClosed   int64 = 0
	BreakerHalfOpen int64 = 1
	BreakerOpen     int64 = 2
)

// Metric label keys.
const (
	labelPolicy attribute.Key = "policy"
	labelStage  attribute.Key = "stage"
	labelResult attribute.Key = "result"
	labelKind   attribute.Key = "kind"
	labelMode   attribute.Key = "mode"
	labelRoute  attribute.Key = "route"
	labelCode   attribute.Key = "code"
	labelOp     attribute.Key = "op"
)

// Descriptions of the histograms, shared with their empty series (Prime).
const (
	descDecisionDuration  = "Time taken by one rate-limit stage to decide."
	descStoreCallDuration = "Latency of calls to the shared limit store, by operation."
	descUpstreamDuration  = "Time from forwarding a request upstream to its response headers, by route."
)

// latencyBuckets (seconds) cover in-process and Redis work: 50µs to 1s.
var latencyBuckets = []float64{
	0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
	0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
}

// upstreamBuckets (seconds) cover proxied requests: 1ms to 30s.
var upstreamBuckets = []float64{
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
	1, 2.5, 5, 10, 30,
}

// Metrics records quotagate's metrics. Label values must come from bounded
// sets (configured route and policy names, the constants above); each distinct
// combination is a time series. Methods are safe for concurrent use and, after
// a combination's first use, do not allocate, but for a histogram
// measurement kept as its bucket's exemplar (one small record; see
// asyncHistogram). All methods on a nil *Metrics
// do nothing, so code under test may pass nil. The counters of the request
// path are kept in atomics of their own and observed at each collection
// (see asyncCounter): their methods do not read ctx, and their series carry
// no exemplars. The histograms are kept in cells of their own too (see
// asyncHistogram): the readers of a MeterProvider built by Setup collect
// those of the last Metrics created on it; on any other provider they are
// exported nowhere.
type Metrics struct {
	decisions     *asyncCounter[[3]string] // policy, stage, result
	decisionDur   *asyncHistogram[string]  // stage
	storeErrors   *asyncCounter[string]    // kind
	readsRefused  *asyncCounter[string]    // reason (quota endpoint reads)
	storeFallback *asyncCounter[[2]string] // policy, mode
	requests      *asyncCounter[routeCode] // route, code
	reloads       metric.Int64Counter
	storeCall     *asyncHistogram[string] // op
	upstream      *asyncHistogram[string] // route
	breakerState  metric.Int64ObservableGauge
	localLimiters metric.Int64ObservableGauge
	meter         metric.Meter

	reloadSets [2][]metric.AddOption // error, ok

	body bodyInstruments

	// exemplars is the exemplarMode of the histograms' recordings.
	exemplars atomic.Int32
	// cardinalityLimit is the most series of one histogram exported by
	// their attributes, as the SDK's; 0 or less: no limit.
	cardinalityLimit int

	// primed holds the empty histogram families of the last Prime.
	primed atomic.Pointer[[]*dto.MetricFamily]

	mu  sync.Mutex
	reg metric.Registration // gauge callback, nil until ObserveGauges
	hot metric.Registration // hot-key callback, nil until ObserveHotKeys
	// logDrops is the dropped-lines callback, nil until ObserveLogDrops.
	logDrops metric.Registration
	// fleet is the fleet size and local denials callback, nil until
	// ObserveFleet.
	fleet metric.Registration
	// regions is the region callback, nil until ObserveRegion.
	regions metric.Registration

	up     upstreamInstruments
	settle settleInstruments
	slots  slotInstruments
	rls    rlsInstruments

	// consoleActions counts the admin console's actions by action and
	// result (see initConsole).
	consoleActions *asyncCounter[[2]string]
}

type routeCode struct {
	route string
	code  int
}

// NewMetrics creates the instruments on mp's meter for InstrumentationName.
// Instrument names translate to the Prometheus names of the product contract
// (see the package doc). When mp is the MeterProvider of Setup's Providers,
// its readers collect the new Metrics' histograms from then on, instead
// of those of the Metrics created on it before. It fails only if mp
// rejects an instrument.
func NewMetrics(mp metric.MeterProvider) (*Metrics, error) {
	if mp == nil {
		return nil, errors.New("telemetry: NewMetrics: nil MeterProvider")
	}
	m := &Metrics{meter: mp.Meter(InstrumentationName), cardinalityLimit: cardinalityLimitFromEnv()}
	var errs []error
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var err error
	m.decisions, err = newAsyncCounter(m.meter, "quotagate.decisions",
		"Rate-limit decisions by policy, stage and result.",
		func(k [3]string) attribute.Set {
			return attribute.NewSet(labelPolicy.String(k[0]), labelStage.String(k[1]), labelResult.String(k[2]))
		})
	check(err)
	m.decisionDur = newAsyncHistogram("quotagate.decision.duration", descDecisionDuration, "s", latencyBuckets,
		func(s string) attribute.Set { return attribute.NewSet(labelStage.String(s)) })
	m.storeErrors, err = newAsyncCounter(m.meter, "quotagate.store.errors",
		"Failed calls to the shared limit store, by kind.",
		func(s string) attribute.Set { return attribute.NewSet(labelKind.String(s)) })
	check(err)
	m.storeFallback, err = newAsyncCounter(m.meter, "quotagate.store.fallback",
		"Decisions taken by a policy's fallback while the store was unavailable.",
		func(k [2]string) attribute.Set {
			return attribute.NewSet(labelPolicy.String(k[0]), labelMode.String(k[1]))
		})
	check(err)
	m.requests, err = newAsyncCounter(m.meter, "quotagate.requests",
		"Requests answered, by route and HTTP status code.",
		func(k routeCode) attribute.Set {
			return attribute.NewSet(labelRoute.String(k.route), labelCode.String(strconv.Itoa(k.code)))
		})
	check(err)
	m.reloads, err = m.meter.Int64Counter("quotagate.config.reloads",
		metric.WithDescription("Configuration reload attempts, by result."))
	check(err)
	m.storeCall = newAsyncHistogram("quotagate.store.call.duration", descStoreCallDuration, "s", latencyBuckets,
		func(s string) attribute.Set { return attribute.NewSet(labelOp.String(s)) })
	m.upstream = newAsyncHistogram("quotagate.upstream.duration", descUpstreamDuration, "s", upstreamBuckets,
		func(s string) attribute.Set { return attribute.NewSet(labelRoute.String(s)) })
	m.breakerState, err = m.meter.Int64ObservableGauge("quotagate.store.breaker.state",
		metric.WithDescription("Store circuit breaker state: 0 closed, 1 half-open, 2 open."))
	check(err)
	m.localLimiters, err = m.meter.Int64ObservableGauge("quotagate.local.limiters",
		metric.WithDescription("Per-key limiters held by the local stage."))
	check(err)
	check(m.initUpstream())
	check(m.initBody())
	check(m.initSettle())
	check(m.initSlots())
	check(m.initReads())
	check(m.initConsole())
	check(m.initRLS())
	if len(errs) > 0 {
		return nil, fmt.Errorf("telemetry: creating instruments: %w", errors.Join(errs...))
	}
	if a, ok := mp.(interface{ collectHistogramsOf(*Metrics) }); ok {
		a.collectHistogramsOf(m)
	}
	if err := observeCounters(m.meter, m.decisions, m.storeErrors, m.storeFallback, m.requests,
		m.up.shed, m.settle.settlements, m.settle.units, m.rls.unauthenticated); err != nil {
		return nil, fmt.Errorf("telemetry: registering counter callback: %w", err)
	}

	m.reloadSets[0] = addOptions(attribute.NewSet(labelResult.String("error")))
	m.reloadSets[1] = addOptions(attribute.NewSet(labelResult.String("ok")))
	if err := m.ObserveLogDrops(func() LogDrops { return LogDrops{} }); err != nil {
		return nil, err
	}
	// Both reload series exist from the start, so a rate or alert on
	// result="error" has a series to read before the first failure.
	for _, o := range m.reloadSets {
		m.reloads.Add(context.Background(), 0, o...)
	}
	return m, nil
}

// Decision counts one rate-limit decision in quotagate_decisions_total.
// result is one of ResultAllowed, ResultDenied, ResultShadowDenied,
// ResultError; stage is "local" or "global".
func (m *Metrics) Decision(ctx context.Context, policy, stage, result string) {
	if m == nil {
		return
	}
	m.decisions.add([3]string{policy, stage, result}, 1)
}

// DecisionDuration records how long a stage took to decide, in
// quotagate_decision_duration_seconds. Negative durations are recorded as 0.
func (m *Metrics) DecisionDuration(ctx context.Context, stage string, d time.Duration) {
	if m == nil {
		return
	}
	m.decisionDur.cell(stage).record(ctx, seconds(d), m.exemplarMode())
}

// StoreError counts a failed store call in quotagate_store_errors_total;
// kind is e.g. "timeout", "unavailable", "breaker_open" or "invalid".
func (m *Metrics) StoreError(ctx context.Context, kind string) {
	if m == nil {
		return
	}
	m.storeErrors.add(kind, 1)
}

// StoreFallback counts a decision a policy's fallback took because the store
// was unavailable, in quotagate_store_fallback_total; mode is FallbackOpen,
// FallbackClosed or FallbackLocal.
func (m *Metrics) StoreFallback(ctx context.Context, policy, mode string) {
	if m == nil {
		return
	}
	m.storeFallback.add([2]string{policy, mode}, 1)
}

// Request counts an answered request in quotagate_requests_total; route is
// the configured route name (never the raw path) and code the HTTP status.
func (m *Metrics) Request(ctx context.Context, route string, code int) {
	if m == nil {
		return
	}
	m.requests.add(routeCode{route, code}, 1)
}

// ConfigReload counts a reload attempt in quotagate_config_reloads_total with
// result "ok" or "error". Both series are exported at 0 from NewMetrics on.
func (m *Metrics) ConfigReload(ctx context.Context, ok bool) {
	if m == nil {
		return
	}
	i := 0
	if ok {
		i = 1
	}
	m.reloads.Add(ctx, 1, m.reloadSets[i]...)
}

// StoreCall records the latency of one store operation (e.g. "check",
// "ping") in quotagate_store_call_duration_seconds.
func (m *Metrics) StoreCall(ctx context.Context, op string, d time.Duration) {
	if m == nil {
		return
	}
	m.storeCall.cell(op).record(ctx, seconds(d), m.exemplarMode())
}

// UpstreamDuration records the time an upstream took to answer, in
// quotagate_upstream_duration_seconds.
func (m *Metrics) UpstreamDuration(ctx context.Context, route string, d time.Duration) {
	if m == nil {
		return
	}
	m.upstream.cell(route).record(ctx, seconds(d), m.exemplarMode())
}

// ObserveGauges registers the callback that reports
// quotagate_store_breaker_state (BreakerClosed, BreakerHalfOpen, BreakerOpen)
// and quotagate_local_limiters at each collection. The functions are called
// at every scrape or export, from any goroutine, and should read the current
// pipeline (for instance through an atomic pointer) so that a reload needs no
// new registration. A nil function leaves its gauge unreported. Calling
// ObserveGauges again replaces the previous functions.
func (m *Metrics) ObserveGauges(breakerState func() int64, localLimiters func() int64) error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.reg != nil {
		if err := m.reg.Unregister(); err != nil {
			return fmt.Errorf("telemetry: replacing gauge callback: %w", err)
		}
		m.reg = nil
	}
	if breakerState == nil && localLimiters == nil {
		return nil
	}
	reg, err := m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if breakerState != nil {
			o.ObserveInt64(m.breakerState, breakerState())
		}
		if localLimiters != nil {
			o.ObserveInt64(m.localLimiters, localLimiters())
		}
		return nil
	}, m.breakerState, m.localLimiters)
	if err != nil {
		return fmt.Errorf("telemetry: registering gauge callback: %w", err)
	}
	m.reg = reg
	return nil
}

// addOptions is the option slice naming set, built once so that adding to a
// synchronous counter allocates nothing.
func addOptions(set attribute.Set) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(set)}
}

func seconds(d time.Duration) float64 {
	if d < 0 {
		return 0
	}
	return d.Seconds()
}
