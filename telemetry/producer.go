package telemetry

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// histProducer is the metric.Producer through which a reader collects the
// histograms of the attached Metrics (see asyncHistogram): at each
// collection, one scope, quotagate's, with every histogram recorded in. A
// reader created with it reports them beside what the SDK collects.
// A producer serves one reader: it reports in the temporality that reader's
// exporter asks of a histogram. The extrema of an interval are kept in the
// cells themselves (histCell.takeInterval), so a Metrics serves them to one
// producer of delta temporality: Setup makes at most one. Safe for
// concurrent use.
type histProducer struct {
	metrics func() *Metrics // nil result: nothing attached

	// delta, when not nil, is what the last collection of each histogram
	// reported, for a reader of delta temporality; guarded by mu.
	mu    sync.Mutex
	delta map[string]*deltaState
}

var _ sdkmetric.Producer = (*histProducer)(nil)

// newHistProducer returns the producer of the Metrics metrics returns, in
// temporality.
func newHistProducer(metrics func() *Metrics, temporality metricdata.Temporality) *histProducer {
	p := &histProducer{metrics: metrics}
	if temporality == metricdata.DeltaTemporality {
		p.delta = map[string]*deltaState{}
	}
	return p
}

// Produce returns the histograms of the attached Metrics recorded in. It
// never fails.
func (p *histProducer) Produce(context.Context) ([]metricdata.ScopeMetrics, error) {
	var m *Metrics
	if p.metrics != nil {
		m = p.metrics()
	}
	if m == nil {
		return nil, nil
	}
	p.mu.Lock()
	ms := m.collectHistograms(time.Now(), p.delta)
	p.mu.Unlock()
	if len(ms) == 0 {
		return nil, nil
	}
	return []metricdata.ScopeMetrics{{Scope: instrumentation.Scope{Name: InstrumentationName}, Metrics: ms}}, nil
}

// collectHistograms reports every histogram of m recorded in, at now:
// cumulative when delta is nil, else since the collection delta (by
// histogram name) remembers.
func (m *Metrics) collectHistograms(now time.Time, delta map[string]*deltaState) []metricdata.Metrics {
	var out []metricdata.Metrics
	for _, h := range []*asyncHistogram[string]{m.decisionDur, m.storeCall, m.upstream, m.slots.queueWait} {
		var ds *deltaState
		if delta != nil {
			if ds = delta[h.name]; ds == nil {
				ds = &deltaState{prev: map[*histCell]histSnapshot{}}
				delta[h.name] = ds
			}
		}
		if d, ok := h.collect(now, m.cardinalityLimit, ds); ok {
			out = append(out, d)
		}
	}
	return out
}

// exemplarMode is which of m's histogram measurements become exemplars.
func (m *Metrics) exemplarMode() exemplarMode { return exemplarMode(m.exemplars.Load()) }

// exemplarModeFrom is the mode the SDK's exemplar filter would have: off
// when off (see exemplarsOff), else as OTEL_METRICS_EXEMPLAR_FILTER says,
// trace_based by default and for a value the SDK does not know; like the
// SDK, it ignores case and surrounding space.
func exemplarModeFrom(getenv func(string) string, off bool) exemplarMode {
	if off {
		return exemplarsNone
	}
	switch strings.ToLower(strings.TrimSpace(getenv(envExemplarFilter))) {
	case "always_on":
		return exemplarsAlways
	case "always_off":
		return exemplarsNone
	}
	return exemplarsTraceBased
}

// envCardinalityLimit is the SDK's setting of the most series an
// instrument exports by their attributes.
const envCardinalityLimit = "OTEL_GO_X_CARDINALITY_LIMIT"

// defaultCardinalityLimit is the SDK's limit when envCardinalityLimit is
// unset or not a number.
const defaultCardinalityLimit = 2000

// cardinalityLimitFromEnv reads the limit from the process environment as
// the SDK does (quotagate does not set one of its own), so that the
// histograms overflow where the SDK's counters do.
func cardinalityLimitFromEnv() int {
	v := strings.TrimSpace(os.Getenv(envCardinalityLimit))
	if v == "" {
		return defaultCardinalityLimit
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return defaultCardinalityLimit
	}
	return n
}
