package telemetry

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// maxCachedSets bounds the lock-free lookup map of each cellSet. Label
// values are bounded by the configuration (routes, policies, stages), so
// real deployments stay below it; past it, further combinations are found
// under a lock instead of growing the map, whose copy-on-write inserts cost
// O(size).
const maxCachedSets = 1024

// measureOpts holds the option slice for one attribute combination, built
// once so that adding to a synchronous counter allocates nothing.
type measureOpts struct {
	add []metric.AddOption
}

func newMeasureOpts(set attribute.Set) measureOpts {
	return measureOpts{add: []metric.AddOption{metric.WithAttributeSet(set)}}
}
