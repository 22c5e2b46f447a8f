package telemetry

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace"
)

// The histograms of the request path (decision, store call, upstream and
// queue-wait durations) are kept in cells of our own, as the counters are
// (see asyncCounter): one histCell per attribute set, whose bucket counts,
// sum, minimum and maximum are atomics, so that a recording is a handful of
// atomic operations with no lock and no allocation. A synchronous
// Float64Histogram.Record runs the SDK's attribute handling and aggregation
// on every measurement, about 1.3 k instructions (BENCHMARKS.md,
// "Histograms kept in cells of their own"). The OpenTelemetry API has no
// asynchronous histogram, so the cells reach the readers through a
// metric.Producer (histProducer) that Setup gives the Prometheus exporter
// and the OTLP reader: it reports each recorded cell as the SDK would have,
// with the same name, unit, description, bucket boundaries, attributes,
// count, sum, minimum, maximum and start time.
//
// Exemplars are kept per bucket, as the SDK's histogram reservoir keeps
// them: the bucket's last measurement taken under a sampled span (or any
// measurement, with OTEL_METRICS_EXEMPLAR_FILTER=always_on), with its
// value, time and trace and span ids. Taking one costs a time.Now and one
// small allocation; a measurement that is not taken (exemplars off, or
// trace_based and the span not sampled) costs nothing more than the check.
//
// As with the SDK, a series is exported from its first recording, and at
// most cardinalityLimit series of a histogram are exported by their
// attributes: the series recorded in later are folded into one series
// labelled otel.metric.overflow=true.

// exemplarMode decides which measurements become exemplars, as the SDK's
// exemplar filter does.
type exemplarMode int32

const (
	exemplarsTraceBased exemplarMode = iota // measurements under a sampled span
	exemplarsNone                           // none
	exemplarsAlways                         // every measurement
)

// sampledMeasurement is an exemplar: one measurement, when it was made and
// the span it was made under (invalid when there was none).
type sampledMeasurement struct {
	value float64
	at    time.Time
	span  trace.SpanContext
}

// histCell is one series of an asyncHistogram. counts[i] counts the
// measurements v with bounds[i-1] < v <= bounds[i] (the last one those
// above every bound); sum, min and max hold float64 bits, and so do imin
// and imax, the extrema since the last delta collection (see
// takeInterval). The count is the sum of counts, so that it always equals
// the +Inf bucket even while a measurement is being recorded; the sum may
// lag it by that measurement.
type histCell struct {
	bounds    []float64
	attrs     attribute.Set
	counts    []atomic.Uint64
	sum       atomic.Uint64
	min, max  atomic.Uint64
	imin      atomic.Uint64
	imax      atomic.Uint64
	listed    listing[*histCell]                   // by first recording
	exemplars []atomic.Pointer[sampledMeasurement] // per bucket, nil until taken
}

func newHistCell(bounds []float64, attrs attribute.Set, order *firstUse[*histCell]) *histCell {
	c := &histCell{
		bounds:    bounds,
		attrs:     attrs,
		listed:    listing[*histCell]{order: order},
		counts:    make([]atomic.Uint64, len(bounds)+1),
		exemplars: make([]atomic.Pointer[sampledMeasurement], len(bounds)+1),
	}
	for _, m := range []*atomic.Uint64{&c.min, &c.imin} {
		m.Store(math.Float64bits(math.Inf(1)))
	}
	for _, m := range []*atomic.Uint64{&c.max, &c.imax} {
		m.Store(math.Float64bits(math.Inf(-1)))
	}
	return c
}

// record counts v (not NaN) in c and, as mode says, keeps it as its
// bucket's exemplar with the span of ctx.
func (c *histCell) record(ctx context.Context, v float64, mode exemplarMode) {
	i := 0
	for i < len(c.bounds) && v > c.bounds[i] {
		i++
	}
	c.counts[i].Add(1)
	addFloat(&c.sum, v)
	lower(&c.min, v)
	raise(&c.max, v)
	lower(&c.imin, v)
	raise(&c.imax, v)
	c.listed.use(c)
	if mode == exemplarsNone {
		return
	}
	sc := trace.SpanContextFromContext(ctx)
	if mode == exemplarsTraceBased && !sc.IsSampled() {
		return
	}
	c.exemplars[i].Store(&sampledMeasurement{value: v, at: time.Now(), span: sc})
}

// lower sets the float64 whose bits a holds to v if v is less.
func lower(a *atomic.Uint64, v float64) {
	for {
		old := a.Load()
		if v >= math.Float64frombits(old) || a.CompareAndSwap(old, math.Float64bits(v)) {
			return
		}
	}
}

// raise sets the float64 whose bits a holds to v if v is greater.
func raise(a *atomic.Uint64, v float64) {
	for {
		old := a.Load()
		if v <= math.Float64frombits(old) || a.CompareAndSwap(old, math.Float64bits(v)) {
			return
		}
	}
}

// takeInterval returns the extrema of the measurements recorded in c since
// the last call (since the start at first) and starts the next interval:
// NaN for both when it has none. A measurement being recorded as it is
// called may count in the extrema of one interval and in the counts of the
// next. One reader of delta temporality calls it (see histProducer).
func (c *histCell) takeInterval() (lo, hi float64) {
	lo = math.Float64frombits(c.imin.Swap(math.Float64bits(math.Inf(1))))
	hi = math.Float64frombits(c.imax.Swap(math.Float64bits(math.Inf(-1))))
	if lo > hi {
		return math.NaN(), math.NaN()
	}
	return lo, hi
}

// addFloat adds v to the float64 whose bits a holds.
func addFloat(a *atomic.Uint64, v float64) {
	for {
		old := a.Load()
		if a.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// histSnapshot is what a histCell (or several, folded) held at one read.
type histSnapshot struct {
	counts    []uint64
	count     uint64
	sum       float64
	min, max  float64
	exemplars []*sampledMeasurement // per bucket, nil where none
}

// snapshot reads c; the bucket counts first, so that the sum includes at
// least the measurements they count.
func (c *histCell) snapshot() histSnapshot {
	s := histSnapshot{counts: make([]uint64, len(c.counts)), exemplars: make([]*sampledMeasurement, len(c.counts))}
	for i := range c.counts {
		s.counts[i] = c.counts[i].Load()
		s.count += s.counts[i]
		s.exemplars[i] = c.exemplars[i].Load()
	}
	s.sum = math.Float64frombits(c.sum.Load())
	s.min = math.Float64frombits(c.min.Load())
	s.max = math.Float64frombits(c.max.Load())
	return s
}

// fold adds o, a snapshot of the same bounds, to s: per bucket, the later
// exemplar is kept. An unknown (NaN) minimum or maximum stays unknown.
func (s *histSnapshot) fold(o histSnapshot) {
	for i := range s.counts {
		s.counts[i] += o.counts[i]
		if e := o.exemplars[i]; e != nil && (s.exemplars[i] == nil || e.at.After(s.exemplars[i].at)) {
			s.exemplars[i] = e
		}
	}
	s.count += o.count
	s.sum += o.sum
	s.min = math.Min(s.min, o.min) // NaN if either is
	s.max = math.Max(s.max, o.max)
}

// point is s as the SDK reports a cumulative data point of attributes
// attrs collected at now for an instrument created at start.
func (s histSnapshot) point(attrs attribute.Set, bounds []float64, start, now time.Time) metricdata.HistogramDataPoint[float64] {
	p := metricdata.HistogramDataPoint[float64]{
		Attributes:   attrs,
		StartTime:    start,
		Time:         now,
		Count:        s.count,
		Bounds:       append([]float64(nil), bounds...),
		BucketCounts: s.counts,
		Sum:          s.sum,
	}
	if s.count > 0 && !math.IsNaN(s.min) {
		p.Min, p.Max = metricdata.NewExtrema(s.min), metricdata.NewExtrema(s.max)
	}
	for _, e := range s.exemplars {
		if e == nil {
			continue
		}
		x := metricdata.Exemplar[float64]{Time: e.at, Value: e.value}
		if e.span.HasTraceID() {
			id := e.span.TraceID()
			x.TraceID = id[:]
		}
		if e.span.HasSpanID() {
			id := e.span.SpanID()
			x.SpanID = id[:]
		}
		p.Exemplars = append(p.Exemplars, x)
	}
	return p
}

// overflowSet labels the series that hold the measurements of the series
// past an instrument's cardinality limit, as the SDK labels it.
var overflowSet = attribute.NewSet(attribute.Bool("otel.metric.overflow", true))

// asyncHistogram is a histogram whose series are histCells keyed by their
// label values K (see cellSet). Safe for concurrent use.
type asyncHistogram[K comparable] struct {
	name, desc, unit string
	bounds           []float64
	start            time.Time // when it was created: the start of every cumulative point
	cells            cellSet[K, *histCell]
	recorded         *firstUse[*histCell] // the cells recorded in, by first recording
}

// newAsyncHistogram creates the histogram name, in unit, with bucket
// boundaries bounds (ascending), and its empty set of cells; build makes
// the attribute set of label values K.
func newAsyncHistogram[K comparable](name, desc, unit string, bounds []float64, build func(K) attribute.Set) *asyncHistogram[K] {
	order := &firstUse[*histCell]{}
	return &asyncHistogram[K]{name: name, desc: desc, unit: unit, bounds: bounds, start: time.Now(), recorded: order,
		cells: newCellSet(func(k K) *histCell { return newHistCell(bounds, build(k), order) })}
}

// cell returns the cell of label values k, creating it empty, not yet
// exported, on first use.
func (h *asyncHistogram[K]) cell(k K) *histCell { return h.cells.get(k) }

// deltaState is what a reader of delta temporality last collected of a
// histogram's cells, and when.
type deltaState struct {
	prev map[*histCell]histSnapshot
	last time.Time
}

// minus is s less p, an earlier snapshot of the same cell: the bucket
// counts, count and sum of the measurements between them, the exemplars
// taken since. The extrema of that interval are not known from the
// snapshots: they are NaN (see takeInterval).
func (s histSnapshot) minus(p histSnapshot) histSnapshot {
	d := histSnapshot{counts: make([]uint64, len(s.counts)), exemplars: make([]*sampledMeasurement, len(s.counts)),
		count: s.count - p.count, sum: s.sum - p.sum, min: math.NaN(), max: math.NaN()}
	for i := range s.counts {
		d.counts[i] = s.counts[i] - p.counts[i]
		if s.exemplars[i] != p.exemplars[i] {
			d.exemplars[i] = s.exemplars[i]
		}
	}
	return d
}

// collect reports every recorded cell as the SDK reports an explicit-bucket
// histogram collected at now: cumulative when delta is nil, else what was
// recorded since the collection delta remembers (series with nothing new
// left out; the interval's minimum and maximum, see takeInterval). At most
// limit series are reported (no limit when limit <= 0): the first limit-1
// cells recorded in (of those with something to report) under their
// attributes, the last folding the others. ok is false when there is
// nothing to report.
func (h *asyncHistogram[K]) collect(now time.Time, limit int, delta *deltaState) (metricdata.Metrics, bool) {
	start, temporality := h.start, metricdata.CumulativeTemporality
	if delta != nil {
		start, temporality = delta.last, metricdata.DeltaTemporality
		if start.IsZero() {
			start = h.start
		}
		delta.last = now
	}
	var points []metricdata.HistogramDataPoint[float64]
	var overflow *histSnapshot
	for _, c := range h.recorded.list() {
		s := c.snapshot()
		if delta != nil {
			p, ok := delta.prev[c]
			delta.prev[c] = s
			if ok {
				s = s.minus(p)
			}
			s.min, s.max = c.takeInterval()
			if s.count == 0 {
				continue
			}
		}
		if limit > 0 && len(points) >= limit-1 {
			if overflow == nil {
				overflow = &s
			} else {
				overflow.fold(s)
			}
			continue
		}
		points = append(points, s.point(c.attrs, h.bounds, start, now))
	}
	if overflow != nil {
		points = append(points, overflow.point(overflowSet, h.bounds, start, now))
	}
	if len(points) == 0 {
		return metricdata.Metrics{}, false
	}
	return metricdata.Metrics{Name: h.name, Description: h.desc, Unit: h.unit,
		Data: metricdata.Histogram[float64]{Temporality: temporality, DataPoints: points}}, true
}
