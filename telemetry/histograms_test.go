package telemetry

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/attribute"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	"go.opentelemetry.io/otel/trace"
)

// syncHistograms are the request path's histograms as synchronous SDK
// instruments, defined as the product contract has them (names, units,
// descriptions, bucket boundaries written out here, not taken from the
// code under test): the reference the cells must export as.
type syncHistograms struct {
	decision, storeCall, upstream, queueWait metric.Float64Histogram
}

func newSyncHistograms(t *testing.T, mp metric.MeterProvider) syncHistograms {
	t.Helper()
	latency := []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
	upstream := []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	meter := mp.Meter(InstrumentationName)
	h := func(name, desc string, bounds []float64) metric.Float64Histogram {
		t.Helper()
		inst, err := meter.Float64Histogram(name, metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(bounds...), metric.WithDescription(desc))
		if err != nil {
			t.Fatal(err)
		}
		return inst
	}
	return syncHistograms{
		decision:  h("quotagate.decision.duration", "Time taken by one rate-limit stage to decide.", latency),
		storeCall: h("quotagate.store.call.duration", "Latency of calls to the shared limit store, by operation.", latency),
		upstream:  h("quotagate.upstream.duration", "Time from forwarding a request upstream to its response headers, by route.", upstream),
		queueWait: h("quotagate.queue.wait", "Time a request waited in a concurrency policy's queue, admitted or not, by policy.", upstream),
	}
}

// histRecording is one measurement of the scenario the tests record
// through the cells and through the synchronous instruments alike.
type histRecording struct {
	family string // decision, store, upstream, queue
	label  string
	d      time.Duration
	ctx    context.Context
}

// record makes r through m's methods (and, for some, the series handles).
func (r histRecording) recordCells(m *Metrics) {
	switch r.family {
	case "decision":
		m.RecordDecisionDuration(r.ctx, m.StageSeries(r.label), r.d)
	case "store":
		m.StoreCall(r.ctx, r.label, r.d)
	case "upstream":
		m.RecordUpstreamDuration(r.ctx, m.RouteSeries(r.label), r.d)
	case "queue":
		m.QueueWait(r.ctx, r.label, r.d)
	}
}

// recordSync makes r through the synchronous instruments, as the methods
// did before the cells.
func (r histRecording) recordSync(h syncHistograms) {
	inst, key := h.decision, labelStage
	switch r.family {
	case "store":
		inst, key = h.storeCall, labelOp
	case "upstream":
		inst, key = h.upstream, labelRoute
	case "queue":
		inst, key = h.queueWait, labelPolicy
	}
	inst.Record(r.ctx, seconds(r.d), metric.WithAttributeSet(attribute.NewSet(key.String(r.label))))
}

// syncReference is newSyncHistograms on a provider of reader r, whose
// exemplar filter is the SDK's default, trace_based, and opts.
func syncReference(t *testing.T, r sdkmetric.Reader, opts ...sdkmetric.Option) syncHistograms {
	t.Helper()
	opts = append([]sdkmetric.Option{sdkmetric.WithReader(r), sdkmetric.WithExemplarFilter(exemplar.TraceBasedFilter)}, opts...)
	mp := sdkmetric.NewMeterProvider(opts...)
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return newSyncHistograms(t, mp)
}

// recordBoth makes every recording of rs in m's cells and in ref.
func recordBoth(m *Metrics, ref syncHistograms, rs []histRecording) {
	for _, r := range rs {
		r.recordCells(m)
		r.recordSync(ref)
	}
}

// spanContext is a context under a span, sampled or not, of fixed ids.
func spanContext(sampled bool, n byte) context.Context {
	cfg := trace.SpanContextConfig{TraceID: trace.TraceID{1, n}, SpanID: trace.SpanID{2, n}}
	if sampled {
		cfg.TraceFlags = trace.FlagsSampled
	}
	return trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(cfg))
}

// histScenario is a first round of measurements in every family, bucket
// edges and the overflow bucket included, some under sampled spans (at
// most one sampled measurement per bucket and round, so that the SDK's
// reservoir keeps exactly that one), and a second round on top.
func histScenario() (first, second []histRecording) {
	bg := context.Background()
	first = []histRecording{
		{"decision", "global", 300 * time.Microsecond, spanContext(true, 1)},
		{"decision", "global", 2 * time.Millisecond, bg},
		{"decision", "global", time.Millisecond, spanContext(false, 2)}, // on a bound: its bucket
		{"decision", "local", -time.Second, bg},                         // recorded as 0
		{"decision", "local", 50 * time.Microsecond, spanContext(true, 3)},
		{"store", "decide", 2 * time.Second, spanContext(true, 4)}, // past the last bound
		{"store", "settle", 700 * time.Microsecond, bg},
		{"upstream", "transfers", 40 * time.Millisecond, bg},
		{"upstream", "search", 31 * time.Second, spanContext(true, 5)},
		{"queue", "payments", 12 * time.Millisecond, bg},
	}
	second = []histRecording{
		{"decision", "global", 5 * time.Millisecond, spanContext(true, 6)},
		{"decision", "rls", 20 * time.Microsecond, bg},
		{"store", "decide", 80 * time.Microsecond, bg},
		{"upstream", "transfers", 40 * time.Millisecond, spanContext(true, 7)},
		{"queue", "payments", time.Second, bg},
	}
	return first, second
}

// cellsReader is a Metrics on a provider whose manual reader collects
// its cells through a histProducer of temporality.
func cellsReader(t *testing.T, temporality metricdata.Temporality) (*Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	var attached atomic.Pointer[Metrics]
	r := sdkmetric.NewManualReader(sdkmetric.WithProducer(newHistProducer(attached.Load, temporality)))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := NewMetrics(mp)
	if err != nil {
		t.Fatal(err)
	}
	attached.Store(m)
	return m, r
}

// histogramsOf collects r and returns its histograms by name.
func histogramsOf(t *testing.T, r sdkmetric.Reader) map[string]metricdata.Metrics {
	t.Helper()
	out := map[string]metricdata.Metrics{}
	for name, m := range collect(t, r) {
		if _, ok := m.Data.(metricdata.Histogram[float64]); ok {
			out[name] = m
		}
	}
	return out
}

// sameHistograms requires got to hold the histograms of want, and only
// those, alike in all but their timestamps.
func sameHistograms(t *testing.T, when string, want, got map[string]metricdata.Metrics) {
	t.Helper()
	if len(want) == 0 {
		t.Fatalf("%s: the reference collected no histogram", when)
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("%s: %s not collected", when, name)
			continue
		}
		if !metricdatatest.AssertEqual(t, w, g, metricdatatest.IgnoreTimestamp()) {
			t.Errorf("%s: %s differs from the synchronous histogram's", when, name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: %s collected, the reference has none", when, name)
		}
	}
}

// TestHistogramsExportAsSynchronousOnes records the same measurements in
// the cells and in synchronous SDK histograms, and requires the same data
// from both readers (what OTLP sends): names, descriptions, units,
// cumulative points with the same attributes, bounds, bucket counts,
// counts, sums, minima, maxima and exemplars (value, trace and span id of
// the sampled measurements), after one round and after a second.
func TestHistogramsExportAsSynchronousOnes(t *testing.T) {
	m, cells := cellsReader(t, metricdata.CumulativeTemporality)
	reference := sdkmetric.NewManualReader()
	ref := syncReference(t, reference)

	first, second := histScenario()
	for i, round := range [][]histRecording{first, second} {
		recordBoth(m, ref, round)
		sameHistograms(t, []string{"first round", "second round"}[i], histogramsOf(t, reference), histogramsOf(t, cells))
	}
	if ex := histogramsOf(t, cells)["quotagate.decision.duration"].Data.(metricdata.Histogram[float64]).DataPoints; len(ex) == 0 {
		t.Fatal("no decision duration point")
	}
}

// TestHistogramsDeltaTemporality: for a reader whose exporter asks for
// delta histograms, each collection reports what was recorded since the
// last one, as the SDK does (series with nothing new left out, exemplars,
// minimum and maximum of the interval only), with sums good to rounding
// (see roundSums).
func TestHistogramsDeltaTemporality(t *testing.T) {
	m, cells := cellsReader(t, metricdata.DeltaTemporality)
	reference := sdkmetric.NewManualReader(sdkmetric.WithTemporalitySelector(func(sdkmetric.InstrumentKind) metricdata.Temporality {
		return metricdata.DeltaTemporality
	}))
	ref := syncReference(t, reference)

	first, second := histScenario()
	for i, round := range [][]histRecording{first, second} {
		recordBoth(m, ref, round)
		want, got := histogramsOf(t, reference), histogramsOf(t, cells)
		roundSums(want)
		roundSums(got)
		sameHistograms(t, []string{"first interval", "second interval"}[i], want, got)
	}
	if got := histogramsOf(t, cells); len(got) != 0 {
		t.Errorf("an interval with nothing recorded reports %d histograms", len(got))
	}
}

// roundSums rounds the sum of every point of ms to 9 significant digits:
// a delta sum is the difference of two cumulative sums, which may differ
// from the sum of the interval's measurements in the last digits.
func roundSums(ms map[string]metricdata.Metrics) {
	for _, m := range ms {
		h := m.Data.(metricdata.Histogram[float64])
		for j := range h.DataPoints {
			h.DataPoints[j].Sum, _ = strconv.ParseFloat(strconv.FormatFloat(h.DataPoints[j].Sum, 'g', 9, 64), 64)
		}
	}
}

// TestHistogramsCardinalityLimit: with the SDK's cardinality limit at 4,
// the first three series recorded in keep their attributes and the others
// are folded into otel.metric.overflow=true, as the SDK folds them; cells
// past the lookup map's limit (2 here) are kept and exported like the
// others, and each label value keeps one cell.
func TestHistogramsCardinalityLimit(t *testing.T) {
	m, cells := cellsReader(t, metricdata.CumulativeTemporality)
	m.cardinalityLimit = 4
	m.decisionDur.cells.limit = 2
	reference := sdkmetric.NewManualReader()
	ref := syncReference(t, reference, sdkmetric.WithCardinalityLimit(4))

	for i, stage := range []string{"a", "b", "c", "d", "e", "c", "e"} {
		r := histRecording{"decision", stage, time.Duration(i+1) * time.Millisecond, spanContext(i == 4, byte(i))}
		r.recordCells(m)
		r.recordSync(ref)
	}
	e := m.StageSeries("e")
	if e != m.StageSeries("e") || m.decisionDur.cells.size() != 5 || m.decisionDur.cells.fast.size() != 2 {
		t.Errorf("%d cells (%d in the lookup map) for 5 stages, or a stage past the limit got a new cell",
			m.decisionDur.cells.size(), m.decisionDur.cells.fast.size())
	}
	want, got := histogramsOf(t, reference), histogramsOf(t, cells)
	sameHistograms(t, "past the limit", want, got)
	points := got["quotagate.decision.duration"].Data.(metricdata.Histogram[float64]).DataPoints
	if len(points) != 4 || points[3].Attributes != overflowSet || points[3].Count != 3 {
		t.Errorf("points %v, want 3 stages and an overflow series of 3", points)
	}
}

// TestHistogramsCardinalityLimitByFirstRecording: the series that keep
// their attributes past the limit are the first ones recorded in, as with
// the SDK, not the first ones whose handle was made: a config load makes
// every route's handle before any request, in the config's order, and a
// series exported under its attributes must not later move into the
// overflow series because a series made earlier got its first recording.
func TestHistogramsCardinalityLimitByFirstRecording(t *testing.T) {
	m, cells := cellsReader(t, metricdata.CumulativeTemporality)
	m.cardinalityLimit = 3
	reference := sdkmetric.NewManualReader()
	ref := syncReference(t, reference, sdkmetric.WithCardinalityLimit(3))

	for _, route := range []string{"a", "b", "c", "d"} { // as a config load does
		m.RouteSeries(route)
	}
	for i, route := range []string{"d", "c", "b", "a", "d"} {
		r := histRecording{"upstream", route, time.Duration(i+1) * time.Millisecond, context.Background()}
		r.recordCells(m)
		r.recordSync(ref)
		sameHistograms(t, "after recording in "+route, histogramsOf(t, reference), histogramsOf(t, cells))
	}
}

// TestHistogramsExpositionUnchanged renders the /metrics text of the same
// measurements made through the cells (the handler Setup builds) and
// through synchronous histograms on a Prometheus exporter set up as Setup
// sets its own up, and requires every line of the four histogram families
// to be the same, byte for byte.
func TestHistogramsExpositionUnchanged(t *testing.T) {
	m, p := newTestMetrics(t)
	reg := prometheus.NewRegistry()
	exp, err := promexporter.New(promexporter.WithRegisterer(reg),
		promexporter.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		promexporter.WithoutTargetInfo(), promexporter.WithoutScopeInfo())
	if err != nil {
		t.Fatal(err)
	}
	ref := syncReference(t, exp)

	first, second := histScenario()
	recordBoth(m, ref, append(first, second...))
	got := histogramLines(t, scrapeText(t, p.Metrics))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(&text, f); err != nil {
			t.Fatal(err)
		}
	}
	want := histogramLines(t, text.String())
	if got != want {
		t.Errorf("histogram exposition differs:\ngot:\n%s\nwant:\n%s", got, want)
	}
}

// scrapeText is the text exposition h serves.
func scrapeText(t *testing.T, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape status %d: %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// histogramLines are the lines of text that belong to the four histogram
// families, in order.
func histogramLines(t *testing.T, text string) string {
	t.Helper()
	var out []string
	for line := range strings.SplitSeq(text, "\n") {
		for _, name := range []string{nameDecisionDuration, nameStoreCallDuration, nameUpstreamDuration, nameQueueWait} {
			if strings.Contains(line, name+" ") || strings.Contains(line, name+"_") || strings.Contains(line, name+"{") {
				out = append(out, line)
				break
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no histogram line")
	}
	return strings.Join(out, "\n")
}

// TestHistogramExemplarsFollowTheFilter: a Metrics created on Setup's
// provider takes exemplars as the SDK's exemplar filter would: none while
// no trace is exported (unless OTEL_METRICS_EXEMPLAR_FILTER says
// otherwise), else as the variable says.
func TestHistogramExemplarsFollowTheFilter(t *testing.T) {
	for _, tc := range []struct {
		env       map[string]string
		want      exemplarMode
		exemplars int // of a measurement under a sampled span
	}{
		{nil, exemplarsNone, 0},
		{map[string]string{envExemplarFilter: "always_off"}, exemplarsNone, 0},
		{map[string]string{envExemplarFilter: "trace_based"}, exemplarsTraceBased, 1},
		{map[string]string{envExemplarFilter: "always_on"}, exemplarsAlways, 1},
		// The SDK reads the value in any case (so its counters, too).
		{map[string]string{envExemplarFilter: " ALWAYS_OFF"}, exemplarsNone, 0},
		{map[string]string{envExemplarFilter: "Always_On"}, exemplarsAlways, 1},
	} {
		p, err := Setup(context.Background(), Options{Getenv: mapEnv(tc.env), InstanceID: "test"})
		if err != nil {
			t.Fatal(err)
		}
		m, err := NewMetrics(p.MeterProvider)
		if err != nil {
			t.Fatal(err)
		}
		m.DecisionDuration(spanContext(true, 1), "global", time.Millisecond)
		if got := m.exemplarMode(); got != tc.want {
			t.Errorf("%v: exemplar mode %d, want %d", tc.env, got, tc.want)
		}
		ms := m.collectHistograms(time.Now(), nil)
		if len(ms) != 1 {
			t.Fatalf("%v: %d histograms collected, want 1", tc.env, len(ms))
		}
		if n := len(ms[0].Data.(metricdata.Histogram[float64]).DataPoints[0].Exemplars); n != tc.exemplars {
			t.Errorf("%v: %d exemplars, want %d", tc.env, n, tc.exemplars)
		}
		_ = p.Shutdown(context.Background())
	}
}

// TestHistogramsDeltaWhileRecording collects a delta reader over and over
// while two goroutines record: every point's count is the sum of its
// buckets, its extrema (when given) lie within the values recorded, and the
// intervals add up to every recording, count and sum.
func TestHistogramsDeltaWhileRecording(t *testing.T) {
	m, cells := cellsReader(t, metricdata.DeltaTemporality)
	const perWorker = 3000
	var done atomic.Int32
	for range 2 {
		go func() {
			defer done.Add(1)
			for i := range perWorker {
				m.StoreCall(context.Background(), "decide", time.Duration(i%7+1)*time.Millisecond)
			}
		}()
	}
	var count uint64
	var sum float64
	check := func() {
		t.Helper()
		h, ok := histogramsOf(t, cells)["quotagate.store.call.duration"]
		if !ok {
			return
		}
		for _, p := range h.Data.(metricdata.Histogram[float64]).DataPoints {
			var buckets uint64
			for _, n := range p.BucketCounts {
				buckets += n
			}
			if buckets != p.Count {
				t.Fatalf("a point of count %d has %d in its buckets", p.Count, buckets)
			}
			lo, okLo := p.Min.Value()
			hi, okHi := p.Max.Value()
			if okLo != okHi || okLo && (lo > hi || lo < 0.001 || hi > 0.007) {
				t.Fatalf("a point's extrema %v (%v), %v (%v), want both or none, within 1 and 7 ms", lo, okLo, hi, okHi)
			}
			count += p.Count
			sum += p.Sum
		}
	}
	for done.Load() < 2 {
		check()
	}
	check()
	if want := uint64(2 * perWorker); count != want {
		t.Errorf("the intervals counted %d recordings, want %d", count, want)
	}
	var want float64
	for i := range perWorker {
		want += 2 * float64(i%7+1) / 1000
	}
	if d := sum - want; d > 1e-6 || d < -1e-6 {
		t.Errorf("the intervals' sums add up to %v, want %v", sum, want)
	}
}
