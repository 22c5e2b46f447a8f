package telemetry

import (
	"maps"
	"sync/atomic"
)

// cowMap is a map for many readers and rare writers: a read is one atomic
// load and a map lookup, with no lock; a write copies the map
// (copy-on-write), which costs O(size). Writers must be serialised by the
// caller; readers may run at any time. The zero value is empty.
type cowMap[K comparable, V any] struct {
	p atomic.Pointer[map[K]V]
}

// load returns the value of k and whether k is present.
func (c *cowMap[K, V]) load(k K) (V, bool) {
	var m map[K]V
	if p := c.p.Load(); p != nil {
		m = *p
	}
	v, ok := m[k]
	return v, ok
}

// size returns the number of entries.
func (c *cowMap[K, V]) size() int {
	if p := c.p.Load(); p != nil {
		return len(*p)
	}
	return 0
}

// store sets k to v in a copy of the map and publishes the copy. The
// caller holds the lock that serialises writers.
func (c *cowMap[K, V]) store(k K, v V) {
	next := make(map[K]V, c.size()+1)
	if p := c.p.Load(); p != nil {
		maps.Copy(next, *p)
	}
	next[k] = v
	c.p.Store(&next)
}
