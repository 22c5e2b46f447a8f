package telemetry

import (
	"maps"
	"sync"
	"sync/atomic"
)

// maxCachedSets bounds the lock-free lookup map of each cellSet. Label
// values are bounded by the configuration (routes, policies, stages), so
// real deployments stay below it; past it, further combinations are found
// under a lock instead of growing the map, whose copy-on-write inserts cost
// O(size).
const maxCachedSets = 1024

// cellSet maps label values K to a value C made once per K: the cells of
// an instrument whose series are kept in cells of our own (asyncCounter,
// asyncHistogram), or prebuilt attribute options. Looking a value up is
// one atomic load and a map lookup while there are at most limit values;
// later ones (label values past any real configuration's) are found under
// a lock. Values are never dropped, since a dropped cell would lose what
// it counted: a reload that keeps a series finds its cell again by its
// label values, and one that drops it leaves the cell, and its values,
// exported. Safe for concurrent use.
type cellSet[K comparable, C any] struct {
	make  func(K) C    // a new cell of label values K
	fast  cowMap[K, C] // at most limit cells; written under mu
	limit int          // most cells in fast
	mu    sync.Mutex   // serialises the writers of fast and extra
	extra map[K]C      // cells past limit
}

func newCellSet[K comparable, C any](make func(K) C) cellSet[K, C] {
	return cellSet[K, C]{make: make, limit: maxCachedSets, extra: map[K]C{}}
}

// get returns the cell of label values k, creating it on first use.
func (s *cellSet[K, C]) get(k K) C {
	if c, ok := s.fast.load(k); ok {
		return c
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.fast.load(k); ok {
		return c
	}
	if c, ok := s.extra[k]; ok {
		return c
	}
	c := s.make(k)
	if s.fast.size() >= s.limit {
		s.extra[k] = c
		return c
	}
	s.fast.store(k, c)
	return c
}

// each calls f with every cell made so far and its label values, in no
// particular order. A cell made while it runs may be left out.
func (s *cellSet[K, C]) each(f func(K, C)) {
	if p := s.fast.p.Load(); p != nil {
		for k, c := range *p { // a published map is never written again
			f(k, c)
		}
	}
	s.mu.Lock()
	extra := maps.Clone(s.extra)
	s.mu.Unlock()
	for k, c := range extra {
		f(k, c)
	}
}

// size returns the number of cells made.
func (s *cellSet[K, C]) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fast.size() + len(s.extra)
}

// firstUse lists the cells of an instrument that have been counted or
// recorded in, in the order of their first use: the order in which the SDK
// admits series under its cardinality limit (the first ones keep their
// attributes, the later ones fold into the overflow series), whatever the
// order in which the cells were made. Safe for concurrent use.
type firstUse[C any] struct {
	mu    sync.Mutex
	cells []C // append-only
}

// add appends c, at its first use.
func (o *firstUse[C]) add(c C) {
	o.mu.Lock()
	o.cells = append(o.cells, c)
	o.mu.Unlock()
}

// listing is what a cell of an instrument keeps to be listed in the
// instrument's firstUse at its first use.
type listing[C any] struct {
	seen  atomic.Bool  // listed in order
	order *firstUse[C] // its instrument's cells by first use
}

// use lists c, the cell that holds l, in order at its first use; a later
// use costs one atomic load.
func (l *listing[C]) use(c C) {
	if !l.seen.Load() && l.seen.CompareAndSwap(false, true) {
		l.order.add(c)
	}
}

// list returns the cells used so far, in order; the slice stays as it is
// while later cells are added.
func (o *firstUse[C]) list() []C {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.cells
}
