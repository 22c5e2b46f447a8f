package gateway

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/quotagate/quotagate/telemetry"
)

// TestBucketQuantile pins the latency estimate of an interval's buckets:
// linear within a bucket, the top bound for the bucket above every bound,
// NaN without measurements.
func TestBucketQuantile(t *testing.T) {
	bounds := []float64{0.001, 0.002, 0.004}
	cases := []struct {
		q      float64
		counts []uint64
		want   float64
	}{
		{0.5, []uint64{0, 0, 0, 0}, math.NaN()},
		{0.5, []uint64{10, 0, 0, 0}, 0.0005},      // half of (0, 1 ms]
		{0.5, []uint64{0, 4, 0, 0}, 0.0015},       // half of (1, 2 ms]
		{0.99, []uint64{0, 0, 100, 0}, 0.00398},   // 99 % of (2, 4 ms]
		{0.5, []uint64{5, 0, 5, 0}, 0.001},        // the 5th of 10 ends the first bucket
		{0.99, []uint64{50, 0, 0, 50}, bounds[2]}, // above every bound
		{0.5, []uint64{1, 1, 1, 1}, bounds[1]},    // the 2nd of 4 ends the second bucket
		{0.99, []uint64{98, 1, 1, 0}, 0.002},      // the 99th of 100 is the second bucket's only one
	}
	for _, c := range cases {
		got := bucketQuantile(c.q, bounds, c.counts)
		if math.IsNaN(c.want) != math.IsNaN(got) || (!math.IsNaN(got) && math.Abs(got-c.want) > 1e-12) {
			t.Errorf("q%v of %v = %v, want %v", c.q, c.counts, got, c.want)
		}
	}
}

// TestHistoryRates: each sample after the first adds the rates of its
// interval, from the totals' differences; an interval without store
// decisions has no latency; a sample not after the one before only
// becomes the base; the ring keeps the last historyPoints points, oldest
// first.
func TestHistoryRates(t *testing.T) {
	h := newHistory()
	nb := len(h.bounds) + 1
	buckets := func(i int, n uint64) []uint64 {
		b := make([]uint64, nb)
		b[i] = n
		return b
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h.sample(t0, telemetry.ConsoleTotals{Decisions: 100, Denied: 10, StoreDecide: buckets(0, 7)})
	if r := h.reply(); len(r.T) != 0 {
		t.Fatalf("one sample made points: %+v", r)
	}
	h.sample(t0.Add(2*time.Second), telemetry.ConsoleTotals{Decisions: 140, Denied: 16, LocalDenied: 4, Fallbacks: 2, StoreErrors: 1,
		StoreDecide: func() []uint64 { b := buckets(0, 7); b[4] = 10; return b }()})
	h.sample(t0.Add(4*time.Second), telemetry.ConsoleTotals{Decisions: 140, Denied: 16, LocalDenied: 4, Fallbacks: 2, StoreErrors: 1,
		StoreDecide: func() []uint64 { b := buckets(0, 7); b[4] = 10; return b }()})
	h.sample(t0.Add(3*time.Second), telemetry.ConsoleTotals{Decisions: 150}) // the clock stepped back
	r := h.reply()
	if len(r.T) != 2 || r.T[0] != t0.Add(2*time.Second).UnixMilli() || r.T[1] != t0.Add(4*time.Second).UnixMilli() {
		t.Fatalf("points at %v, want 2 s and 4 s after the first sample", r.T)
	}
	if r.Decisions[0] != 20 || r.Denied[0] != 3 || r.LocalDenied[0] != 2 || r.Fallbacks[0] != 1 || r.StoreErrors[0] != 0.5 {
		t.Errorf("first interval's rates %+v", r)
	}
	// 10 decide calls in bucket 4, (0.0005, 0.001]: the median halfway.
	if r.StoreP50[0] == nil || math.Abs(*r.StoreP50[0]-0.00075) > 1e-9 || r.StoreP99[0] == nil || math.Abs(*r.StoreP99[0]-0.000995) > 1e-9 {
		t.Errorf("first interval's latency p50 %v p99 %v, want 0.00075 and 0.000995", r.StoreP50[0], r.StoreP99[0])
	}
	if r.Decisions[1] != 0 || r.StoreP50[1] != nil || r.StoreP99[1] != nil {
		t.Errorf("a quiet interval: decisions %v, latency %v %v; want 0 and none", r.Decisions[1], r.StoreP50[1], r.StoreP99[1])
	}
	b, _ := json.Marshal(r)
	var generic map[string]any
	if err := json.Unmarshal(b, &generic); err != nil || generic["store_p50_s"].([]any)[1] != nil {
		t.Errorf("a latency without calls must be null in JSON: %s", b)
	}
	// The back step became the base: the next point counts from it.
	h.sample(t0.Add(5*time.Second), telemetry.ConsoleTotals{Decisions: 160, StoreDecide: buckets(0, 0)})
	if r := h.reply(); len(r.T) != 3 || r.Decisions[2] != 5 {
		t.Errorf("after a back step: %v points, last decisions %v, want 3 and 5/s", len(r.T), r.Decisions)
	}

	ring := newHistory()
	for i := range historyPoints + 11 {
		ring.sample(t0.Add(time.Duration(i)*time.Second), telemetry.ConsoleTotals{Decisions: int64(i * i), StoreDecide: buckets(0, 0)})
	}
	r = ring.reply()
	if len(r.T) != historyPoints || r.MaxPoints != historyPoints {
		t.Fatalf("%d points held of at most %d, want %d", len(r.T), r.MaxPoints, historyPoints)
	}
	// The point at i s has i*i - (i-1)*(i-1) = 2i-1 per second; the
	// first held is i = 11.
	for j, ms := range r.T {
		i := int64(j + 11)
		if ms != t0.Add(time.Duration(i)*time.Second).UnixMilli() || r.Decisions[j] != float64(2*i-1) {
			t.Fatalf("point %d: at %d with %v, want %d s and %d/s", j, ms, r.Decisions[j], i, 2*i-1)
		}
	}
}

// TestHistorySamplesTheGatewaysCounters: the history's points are the
// rates of the gateway's own decision and denial counters between two
// samples, served as JSON on /console/history.
func TestHistorySamplesTheGatewaysCounters(t *testing.T) {
	s := newSupportFixture(t, baseConfig)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s.gw.history.sample(t0, s.gw.opts.Metrics.ConsoleTotals())
	for range 8 { // acme (free, no stage 1): tenant admits 5, then denies 3
		s.do("GET", "/v1/transfers/1", bearer(freeKey), nil)
	}
	s.gw.history.sample(t0.Add(2*time.Second), s.gw.opts.Metrics.ConsoleTotals())
	r := httptest.NewRequest(http.MethodGet, "/console/history", nil)
	r.Header.Set("Authorization", "Bearer "+adminToken)
	w := httptest.NewRecorder()
	s.admin.ServeHTTP(w, r)
	var h historyReply
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &h) != nil {
		t.Fatalf("GET /console/history: %d %s", w.Code, w.Body.String())
	}
	// 8 requests, one policy each (tenant): 8 decisions, 3 denied, in 2 s.
	if len(h.T) != 1 || h.Decisions[0] != 4 || h.Denied[0] != 1.5 || h.LocalDenied[0] != 0 || h.IntervalS != historyInterval.Seconds() {
		t.Errorf("history %s, want one point of 4 decisions/s and 1.5 denied/s", w.Body.String())
	}
	if h.StoreP50[0] == nil || *h.StoreP50[0] <= 0 {
		t.Errorf("store latency p50 %v, want the decide calls' (the memory store is timed too)", h.StoreP50[0])
	}
}
