package gateway

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/quotagate/quotagate/telemetry"
)

// The admin console's history: every historyInterval, while the admin
// listener serves, the gateway samples its own counters (the cells
// /metrics exports, see telemetry.ConsoleTotals) and keeps the rates of
// the interval in a ring of historyPoints points: the last ten minutes,
// in a few kilobytes whatever the traffic. Nothing is kept across a
// restart and nothing leaves the process but through GET /console/history.
const (
	historyInterval = 2 * time.Second
	historyPoints   = 300
)

// historyPoint is one interval's rates. The latencies are NaN when the
// interval had no store decision.
type historyPoint struct {
	at                             time.Time
	decisions, denied, localDenied float64 // per second
	fallbacks, storeErrors         float64 // per second
	storeP50, storeP99             float64 // seconds
}

// history is the ring of points and the totals of the last sample. Safe
// for concurrent use.
type history struct {
	bounds []float64 // of the decide latency's buckets

	mu     sync.Mutex
	last   telemetry.ConsoleTotals
	lastAt time.Time // zero before the first sample
	points [historyPoints]historyPoint
	n      int // points held, at most historyPoints
	next   int // where the next point goes
}

func newHistory() *history { return &history{bounds: telemetry.StoreCallBounds()} }

// sample records the totals t read at now: the first sample is the base
// of the next; each later one adds the point of the interval since the
// one before. A sample not after the one before (the clock stepped back)
// only becomes the base.
func (h *history) sample(now time.Time, t telemetry.ConsoleTotals) {
	h.mu.Lock()
	defer h.mu.Unlock()
	prev, prevAt := h.last, h.lastAt
	h.last, h.lastAt = t, now
	if prevAt.IsZero() || !now.After(prevAt) {
		return
	}
	dt := now.Sub(prevAt).Seconds()
	per := func(a, b int64) float64 { return float64(max(0, b-a)) / dt }
	p := historyPoint{
		at:          now,
		decisions:   per(prev.Decisions, t.Decisions),
		denied:      per(prev.Denied, t.Denied),
		localDenied: per(prev.LocalDenied, t.LocalDenied),
		fallbacks:   per(prev.Fallbacks, t.Fallbacks),
		storeErrors: per(prev.StoreErrors, t.StoreErrors),
	}
	delta := make([]uint64, len(t.StoreDecide))
	for i := range delta {
		if i < len(prev.StoreDecide) && t.StoreDecide[i] >= prev.StoreDecide[i] {
			delta[i] = t.StoreDecide[i] - prev.StoreDecide[i]
		}
	}
	p.storeP50, p.storeP99 = bucketQuantile(0.5, h.bounds, delta), bucketQuantile(0.99, h.bounds, delta)
	h.points[h.next] = p
	h.next = (h.next + 1) % historyPoints
	h.n = min(h.n+1, historyPoints)
}

// bucketQuantile estimates the q-quantile of the measurements that counts
// holds per bucket (counts[i] those of at most bounds[i] and more than the
// bound before, the last those above every bound), interpolating linearly
// within a bucket as Prometheus' histogram_quantile does, and reporting
// the highest bound for the bucket above it. NaN without measurements.
func bucketQuantile(q float64, bounds []float64, counts []uint64) float64 {
	var total uint64
	for _, c := range counts {
		total += c
	}
	if total == 0 {
		return math.NaN()
	}
	rank := q * float64(total)
	var seen uint64
	lower := 0.0
	for i, c := range counts {
		if float64(seen+c) >= rank && c > 0 {
			if i >= len(bounds) {
				return bounds[len(bounds)-1]
			}
			return lower + (bounds[i]-lower)*(rank-float64(seen))/float64(c)
		}
		seen += c
		if i < len(bounds) {
			lower = bounds[i]
		}
	}
	return bounds[len(bounds)-1]
}

// historyReply is the JSON of GET /console/history: one array per
// series, index i of each being the interval that ended at t[i] (Unix
// milliseconds), oldest first. Rates are per second over the interval;
// the store latencies are of quotagate_store_call_duration_seconds{op="decide"}
// in seconds, null for an interval without a store decision.
type historyReply struct {
	IntervalS   float64    `json:"interval_s"`
	MaxPoints   int        `json:"max_points"`
	T           []int64    `json:"t"`
	Decisions   []float64  `json:"decisions_per_s"`
	Denied      []float64  `json:"denied_per_s"`
	LocalDenied []float64  `json:"local_denied_per_s"`
	Fallbacks   []float64  `json:"fallbacks_per_s"`
	StoreErrors []float64  `json:"store_errors_per_s"`
	StoreP50    []*float64 `json:"store_p50_s"`
	StoreP99    []*float64 `json:"store_p99_s"`
}

// reply returns the points held, oldest first.
func (h *history) reply() historyReply {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := historyReply{IntervalS: historyInterval.Seconds(), MaxPoints: historyPoints,
		T: make([]int64, 0, h.n), Decisions: make([]float64, 0, h.n), Denied: make([]float64, 0, h.n),
		LocalDenied: make([]float64, 0, h.n), Fallbacks: make([]float64, 0, h.n), StoreErrors: make([]float64, 0, h.n),
		StoreP50: make([]*float64, 0, h.n), StoreP99: make([]*float64, 0, h.n)}
	rounded := func(v float64) float64 { return math.Round(v*1000) / 1000 }
	latency := func(v float64) *float64 {
		if math.IsNaN(v) {
			return nil
		}
		v = math.Round(v*1e7) / 1e7 // 0.1 µs
		return &v
	}
	for i := range h.n {
		p := h.points[(h.next-h.n+i+historyPoints)%historyPoints]
		r.T = append(r.T, p.at.UnixMilli())
		r.Decisions = append(r.Decisions, rounded(p.decisions))
		r.Denied = append(r.Denied, rounded(p.denied))
		r.LocalDenied = append(r.LocalDenied, rounded(p.localDenied))
		r.Fallbacks = append(r.Fallbacks, rounded(p.fallbacks))
		r.StoreErrors = append(r.StoreErrors, rounded(p.storeErrors))
		r.StoreP50 = append(r.StoreP50, latency(p.storeP50))
		r.StoreP99 = append(r.StoreP99, latency(p.storeP99))
	}
	return r
}

// recordHistory samples the gateway's counters into its history at once
// and then every historyInterval until ctx is done, on the wall clock
// (rates are per second of real time). It does nothing without metrics.
func (g *Gateway) recordHistory(ctx context.Context) {
	if g.opts.Metrics == nil {
		return
	}
	g.history.sample(time.Now(), g.opts.Metrics.ConsoleTotals())
	tick := time.NewTicker(historyInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			g.history.sample(now, g.opts.Metrics.ConsoleTotals())
		}
	}
}

// historyHandler serves GET /console/history, unindented (its arrays
// are long).
func (g *Gateway) historyHandler(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(g.history.reply())
}
