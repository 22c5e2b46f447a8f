package hotkeys

import (
	"math/rand/v2"
	"sort"
	"sync"
	"time"
)

// Tracker estimates which keys take the most decisions, in bounded memory
// and at a small, lock-free cost per decision, so an operator can see which
// tenant would gain from a lease.
//
// Observe counts about one decision in SampleEvery, chosen at random with
// the runtime's per-thread generator (no lock, and no counter that every
// request would write);
// the sampled ones go into a Space-Saving summary of Capacity entries: a key
// not in a full summary replaces the entry with the lowest count and
// inherits that count, so a count overestimates by at most the count it
// inherited (reported as Error). Counts are kept per window of Window and
// Top reports the last complete window (the current one before the first
// is complete), so a key that went quiet drops out.
//
// A Tracker is safe for concurrent use.
type Tracker struct {
	every  uint64
	cap    int
	window time.Duration
	now    func() time.Time

	mu      sync.Mutex
	start   time.Time // of the current window
	current map[string]*hotCount
	last    []Key // the last complete window, sorted
	lastLen time.Duration
}

type hotCount struct{ n, err uint64 }

// HotKey is one key's estimated decision rate.
type Key struct {
	Key string `json:"key"`
	// PerSecond is the estimated decisions per second over the window.
	PerSecond float64 `json:"per_second"`
	// Error bounds the overestimate of PerSecond (Space-Saving inheritance).
	Error float64 `json:"error_per_second"`
}

// Options configures New; zero fields take the defaults.
type Options struct {
	Capacity    int           // entries kept; default 64
	SampleEvery int           // count one decision in this many; default 16
	Window      time.Duration // length of a counting window; default 10s
	Now         func() time.Time
}

// New returns an empty summary.
func New(o Options) *Tracker {
	if o.Capacity <= 0 {
		o.Capacity = 64
	}
	if o.SampleEvery <= 0 {
		o.SampleEvery = 16
	}
	if o.Window <= 0 {
		o.Window = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Tracker{every: uint64(o.SampleEvery), cap: o.Capacity, window: o.Window, now: o.Now,
		start: o.Now(), current: make(map[string]*hotCount, o.Capacity)}
}

// Observe records one decision for key.
func (h *Tracker) Observe(key string) {
	if h.every > 1 && rand.Uint64N(h.every) != 0 {
		return
	}
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rotate(now)
	if c, ok := h.current[key]; ok {
		c.n++
		return
	}
	if len(h.current) < h.cap {
		h.current[key] = &hotCount{n: 1}
		return
	}
	var minKey string
	var minC *hotCount
	for k, c := range h.current {
		if minC == nil || c.n < minC.n {
			minKey, minC = k, c
		}
	}
	delete(h.current, minKey)
	h.current[key] = &hotCount{n: minC.n + 1, err: minC.n}
}

// rotate closes the current window once it is Window long. Callers hold mu.
func (h *Tracker) rotate(now time.Time) {
	elapsed := now.Sub(h.start)
	if elapsed < h.window {
		return
	}
	h.last, h.lastLen = h.rank(h.current, elapsed), elapsed
	h.current = make(map[string]*hotCount, h.cap)
	h.start = now
}

// rank turns counts over elapsed into rates, highest first.
func (h *Tracker) rank(counts map[string]*hotCount, elapsed time.Duration) []Key {
	secs := elapsed.Seconds()
	if secs <= 0 {
		secs = 1e-9
	}
	out := make([]Key, 0, len(counts))
	for k, c := range counts {
		out = append(out, Key{Key: k, PerSecond: float64(c.n*h.every) / secs, Error: float64(c.err*h.every) / secs})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].PerSecond != out[j].PerSecond {
			return out[i].PerSecond > out[j].PerSecond
		}
		return out[i].Key < out[j].Key
	})
	return out
}

// Top returns up to n keys of the last complete window, highest rate
// first; before the first window completes, the current window so far.
// With no key it returns an empty slice, never nil, so that it encodes as
// a JSON [] rather than null.
func (h *Tracker) Top(n int) []Key {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rotate(now)
	top := h.last
	if top == nil {
		top = h.rank(h.current, now.Sub(h.start))
	}
	if len(top) > n {
		top = top[:n]
	}
	return append(make([]Key, 0, len(top)), top...)
}
