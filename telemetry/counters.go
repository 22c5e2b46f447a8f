package telemetry

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The monotonic counters of the request path (decisions, requests, store
// errors and fallbacks, shed requests, settlements) are counted in cells of
// our own, one atomic integer per attribute set, and exported through
// observable counters: one callback, registered once in NewMetrics, observes
// every cell at each collection. A synchronous Add runs the SDK's attribute
// handling (attrnorm.SetDedup through reflect) and aggregation on every
// measurement, about 1.7 k instructions even with a prebuilt attribute set;
// an atomic add is a few (BENCHMARKS.md, "Counters kept in cells of their
// own"). What is exported is the same: an observable counter
// is a cumulative monotonic sum with the same name, description and
// attributes, and the callback reports each cell's total. The one
// difference is that observed values carry no exemplars.
//
// A cell lives as long as its Metrics: a reload that drops a policy or a
// route leaves its cells, and their totals, exported, as the SDK keeps the
// series of a synchronous counter; a reload that keeps one finds the same
// cell by its label values, so its count goes on from where it was. As with
// the SDK, a series is exported from its first count (an add of 0, as
// priming does, included), not from the moment a handle resolves its cell.

// counterCell is one series of an asyncCounter: its running total, whether
// it has been counted in (and so is exported), and the options that name
// its attribute set when it is observed.
type counterCell struct {
	n      atomic.Int64
	listed listing[*counterCell] // by first count
	obs    []metric.ObserveOption
}

// add counts n (not negative: a counter never goes back) in c; n may be 0
// to export the series at its current total.
func (c *counterCell) add(n int64) {
	if n > 0 {
		c.n.Add(n)
	}
	c.listed.use(c)
}

// asyncCounter is a monotonic counter whose series are counterCells keyed
// by their label values K (see cellSet). Safe for concurrent use.
type asyncCounter[K comparable] struct {
	inst    metric.Int64ObservableCounter
	cells   cellSet[K, *counterCell]
	counted *firstUse[*counterCell] // the cells counted in, by first count
}

// newAsyncCounter creates the observable counter name on meter and its
// empty set of cells; build makes the attribute set of label values K.
func newAsyncCounter[K comparable](meter metric.Meter, name, desc string, build func(K) attribute.Set) (*asyncCounter[K], error) {
	inst, err := meter.Int64ObservableCounter(name, metric.WithDescription(desc))
	if err != nil {
		return nil, err
	}
	order := &firstUse[*counterCell]{}
	return &asyncCounter[K]{inst: inst, counted: order, cells: newCellSet(func(k K) *counterCell {
		return &counterCell{listed: listing[*counterCell]{order: order}, obs: []metric.ObserveOption{metric.WithAttributeSet(build(k))}}
	})}, nil
}

// cell returns the cell of label values k, creating it at zero, not yet
// exported, on first use.
func (c *asyncCounter[K]) cell(k K) *counterCell { return c.cells.get(k) }

// add counts n in the series of label values k.
func (c *asyncCounter[K]) add(k K, n int64) { c.cell(k).add(n) }

// observe reports the total of every cell counted in to o, in the order
// of their first counts, so that the SDK, which admits an observable's
// series under its cardinality limit in the order they are observed at
// each collection, keeps the same series under their attributes from one
// collection to the next, as it does for a synchronous counter.
func (c *asyncCounter[K]) observe(o metric.Observer) {
	for _, cell := range c.counted.list() {
		o.ObserveInt64(c.inst, cell.n.Load(), cell.obs...)
	}
}

// observedCounter is what the shared callback needs of an asyncCounter.
type observedCounter interface {
	observe(metric.Observer)
	instrument() metric.Observable
}

func (c *asyncCounter[K]) instrument() metric.Observable { return c.inst }

// observeCounters registers, once, the callback that reports every cell of
// cs at each collection. The registration lasts as long as the meter
// provider.
func observeCounters(meter metric.Meter, cs ...observedCounter) error {
	insts := make([]metric.Observable, len(cs))
	for i, c := range cs {
		insts[i] = c.instrument()
	}
	_, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, c := range cs {
			c.observe(o)
		}
		return nil
	}, insts...)
	return err
}
