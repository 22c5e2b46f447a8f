package telemetry

import (
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// maxCachedSets bounds each attribute-set cache. Label values are bounded by
// the configuration (routes, policies, stages), so real deployments stay
// below it; past it, further combinations are built per call (one small
// allocation each) instead of growing the cache, whose copy-on-write inserts
// cost O(size).
const maxCachedSets = 1024

// measureOpts holds the option slices for one attribute combination, built
// once so that recording a measurement allocates nothing.
type measureOpts struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

func newMeasureOpts(set attribute.Set) measureOpts {
	o := metric.WithAttributeSet(set)
	return measureOpts{add: []metric.AddOption{o}, rec: []metric.RecordOption{o}}
}

// optCache maps a label combination to its prebuilt options. Reads are one
// atomic load and a map lookup; a miss copies the map (copy-on-write), which
// happens once per combination. Safe for concurrent use.
type optCache[K comparable] struct {
	m     cowMap[K, measureOpts]
	mu    sync.Mutex // serialises writers
	build func(K) attribute.Set
	limit int // most entries kept
}

func newOptCache[K comparable](build func(K) attribute.Set) *optCache[K] {
	return &optCache[K]{build: build, limit: maxCachedSets}
}

func (c *optCache[K]) get(k K) measureOpts {
	if o, ok := c.m.load(k); ok {
		return o
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if o, ok := c.m.load(k); ok {
		return o
	}
	o := newMeasureOpts(c.build(k))
	if c.m.size() >= c.limit {
		return o
	}
	c.m.store(k, o)
	return o
}
