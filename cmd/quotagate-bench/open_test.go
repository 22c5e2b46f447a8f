package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a clock that moves only when told to: SleepUntil jumps to
// the time slept until (never back), and tests advance it to stand for
// the time a request takes. It is safe for concurrent use.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1700000000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) SleepUntil(_ context.Context, t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// near reports whether a quantile got from a hist is want, within the
// hist's bucket error (at most 1/histSub below, never above).
func near(got, want time.Duration) bool {
	return got <= want && float64(want-got) <= float64(want)/histSub
}

// nearUS reports whether a difference of two hist quantiles, in µs, is
// want within the buckets' error (0.8% of the larger quantile, here at
// most 5 ms).
func nearUS(got, want float64) bool { return got > want-40 && got < want+40 }

func TestScheduleDueTimes(t *testing.T) {
	start := time.Unix(1700000000, 0)
	s := newSchedule(start, 3, time.Second)
	if s.n != 3 {
		t.Fatalf("3/s over 1s: n = %d, want 3", s.n)
	}
	for k, want := range []time.Duration{0, 333333333, 666666666, time.Second} {
		if got := s.due(uint64(k)).Sub(start); got != want {
			t.Errorf("due(%d) = start+%v, want start+%v", k, got, want)
		}
	}
	// No drift over a long run: due(k) is computed, not accumulated.
	s = newSchedule(start, 1000, 10*time.Second)
	if s.n != 10000 || s.due(9999).Sub(start) != 9999*time.Millisecond {
		t.Errorf("1000/s over 10s: n = %d, due(9999) = start+%v", s.n, s.due(9999).Sub(start))
	}
	// Every scheduled request is due inside the window, the next one not.
	for _, tc := range []struct {
		rate float64
		d    time.Duration
		n    uint64
	}{{7.5, time.Second, 8}, {12000, 5 * time.Second, 60000}, {0.5, time.Second, 1}, {2345.6, 1500 * time.Millisecond, 3519}} {
		s := newSchedule(start, tc.rate, tc.d)
		if s.n != tc.n || !s.due(s.n-1).Before(start.Add(tc.d)) || s.due(s.n).Before(start.Add(tc.d)) {
			t.Errorf("%v/s over %v: n = %d (want %d), last due +%v, next +%v", tc.rate, tc.d, s.n, tc.n,
				s.due(s.n-1).Sub(start), s.due(s.n).Sub(start))
		}
	}
}

func TestOpenLoopCountsQueueingFromDueTime(t *testing.T) {
	clk := newFakeClock()
	start := clk.Now()
	// 10/s over 1 s on one connection: due every 100 ms. The first answer
	// takes 250 ms, every later one 10 ms.
	var sent []time.Duration
	res := openLoop(context.Background(), clk, 10, time.Second, 1, func(int) sendFunc {
		return func() (int, error) {
			sent = append(sent, clk.Now().Sub(start))
			if len(sent) == 1 {
				clk.advance(250 * time.Millisecond)
			} else {
				clk.advance(10 * time.Millisecond)
			}
			return http.StatusOK, nil
		}
	})
	ms := time.Millisecond
	// Request 1 is due at 100 ms but goes out at 250, when the connection
	// is free: its latency is 160 ms, not the 10 ms a closed loop would
	// record; request 2 (due 200, sent 260) 70 ms; from request 3 on the
	// schedule is met again.
	wantSent := []time.Duration{0, 250 * ms, 260 * ms, 300 * ms, 400 * ms, 500 * ms, 600 * ms, 700 * ms, 800 * ms, 900 * ms}
	if len(sent) != len(wantSent) {
		t.Fatalf("sent %d requests at %v, want %d", len(sent), sent, len(wantSent))
	}
	for i := range sent {
		if sent[i] != wantSent[i] {
			t.Errorf("request %d sent at %v, want %v", i, sent[i], wantSent[i])
		}
	}
	if res.Requests != 10 || res.OK != 10 || res.Unsent != 0 || res.Latency.Count() != 10 || res.Offered != 10 {
		t.Errorf("counts: %+v", res)
	}
	if res.Elapsed != time.Second {
		t.Errorf("elapsed %v, want the run's 1s (the last answer came at 910ms)", res.Elapsed)
	}
	// Latencies: 250, 160, 70 and seven of 10 ms.
	for _, q := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 10 * ms}, {0.7, 10 * ms}, {0.8, 70 * ms}, {0.9, 160 * ms}, {1, 250 * ms}} {
		if got := res.Latency.Quantile(q.q); !near(got, q.want) {
			t.Errorf("latency q%v = %v, want %v", q.q, got, q.want)
		}
	}
	// Lag: 150 ms for request 1, 60 ms for request 2, none for the rest.
	if got := res.Lag.Quantile(1); got != 150*ms {
		t.Errorf("largest lag %v, want 150ms", got)
	}
	if got := res.Lag.Quantile(0.9); !near(got, 60*ms) {
		t.Errorf("lag q0.9 %v, want 60ms", got)
	}
	if got := res.Lag.Quantile(0.8); got != 0 {
		t.Errorf("lag q0.8 %v, want 0", got)
	}
}

func TestOpenLoopGivesUpAtTheDrainDeadline(t *testing.T) {
	clk := newFakeClock()
	// 10/s over 1 s, drain 1 s: nothing is sent from 2 s on. The first
	// answer takes 5 s, so the other nine are given up at 5 s.
	calls := 0
	res := openLoop(context.Background(), clk, 10, time.Second, 1, func(int) sendFunc {
		return func() (int, error) {
			calls++
			clk.advance(5 * time.Second)
			return http.StatusOK, nil
		}
	})
	if calls != 1 || res.Requests != 1 || res.Unsent != 9 || res.Latency.Count() != 10 {
		t.Fatalf("calls %d, requests %d, unsent %d, latencies %d; want 1, 1, 9, 10", calls, res.Requests, res.Unsent, res.Latency.Count())
	}
	// The unsent count from their due time to 5 s: 4.1 s .. 4.9 s, below
	// the sent one's 5 s.
	if got := res.Latency.Quantile(1); got != 5*time.Second {
		t.Errorf("largest latency %v, want 5s", got)
	}
	if got := res.Latency.Quantile(0.1); !near(got, 4100*time.Millisecond) {
		t.Errorf("smallest latency %v, want 4.1s", got)
	}
	if res.Elapsed != 5*time.Second {
		t.Errorf("elapsed %v, want 5s", res.Elapsed)
	}
	if openDrain(10*time.Second) != 5*time.Second || openDrain(time.Second) != time.Second {
		t.Error("openDrain: want half the run, at least 1s")
	}
}

func TestOpenLoopWorkersTakeEachRequestOnce(t *testing.T) {
	clk := newFakeClock()
	var n atomic.Int64
	res := openLoop(context.Background(), clk, 100, time.Second, 4, func(int) sendFunc {
		return func() (int, error) {
			switch n.Add(1) % 4 {
			case 0:
				return http.StatusOK, nil
			case 1:
				return http.StatusTooManyRequests, nil
			case 2:
				return http.StatusServiceUnavailable, nil
			}
			return 0, errors.New("connection refused")
		}
	})
	if n.Load() != 100 || res.Requests != 100 || res.Latency.Count() != 100 || res.Unsent != 0 {
		t.Fatalf("sent %d, requests %d, latencies %d, unsent %d; want 100 each, 0 unsent", n.Load(), res.Requests, res.Latency.Count(), res.Unsent)
	}
	if res.OK != 25 || res.Limited != 25 || res.Other != 25 || res.Errors != 25 {
		t.Errorf("status mix %d/%d/%d/%d, want 25 each", res.OK, res.Limited, res.Other, res.Errors)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res = openLoop(ctx, newFakeClock(), 100, time.Second, 4, func(int) sendFunc {
		return func() (int, error) { t.Error("sent after cancel"); return 0, nil }
	})
	if res.Requests != 0 {
		t.Errorf("cancelled: %d requests", res.Requests)
	}
}

func TestRunLoadOpenOverHTTP(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	starts, ends := 0, 0
	res, err := runLoad(context.Background(), loadSpec{
		URL: srv.URL, Conns: 4, Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond,
		Mix: mixOne, Auth: [][]string{{"Bearer k"}}, Rate: 200,
	}, func() { starts++ }, func() { ends++ })
	if err != nil {
		t.Fatal(err)
	}
	// Warmup 10 requests, then 60, every one sent: the drain (1 s) leaves
	// a busy machine time to catch up.
	if res.Requests != 60 || res.OK != 60 || res.Unsent != 0 || hits.Load() != 70 || starts != 1 || ends != 1 {
		t.Errorf("requests %d, 200s %d, unsent %d, server hits %d, hooks %d/%d; want 60, 60, 0, 70, 1/1",
			res.Requests, res.OK, res.Unsent, hits.Load(), starts, ends)
	}
	if res.Offered != 200 || res.Elapsed < 300*time.Millisecond {
		t.Errorf("offered %v, elapsed %v", res.Offered, res.Elapsed)
	}
}

func TestAggregateOpenAddsOverThePairedUpstreamRuns(t *testing.T) {
	mk := func(c, pairOf string, pct float64, round int, lat time.Duration, reqs uint64, load string) sample {
		l := &loadResult{Elapsed: 2 * time.Second, Requests: reqs, OK: reqs, Offered: 100}
		l.Latency.Record(lat)
		l.Lag.Record(lat / 10)
		return sample{Round: round, Mix: mixOne, Contender: c, PairOf: pairOf, Percent: pct, Load: l, LoadAvg: load, ContenderTicks: 2}
	}
	ms := time.Millisecond
	samples := []sample{
		// Round 1: the upstream next to quotagate at 1 ms, next to nginx at 5 ms
		// (the machine got busy); quotagate 3 ms, nginx 5.5 ms.
		mk(cUpstream, cQGLease, 50, 1, ms, 200, "1.0"), mk(cQGLease, "", 50, 1, 3*ms, 150, "1.5"),
		mk(cNginx, "", 50, 1, 5500*time.Microsecond, 200, "3.0"), mk(cUpstream, cNginx, 50, 1, 5*ms, 200, "3.1"),
		// Round 2: quotagate 4 ms over the upstream's 2 ms; nginx alone.
		mk(cQGLease, "", 50, 2, 4*ms, 150, "1.2"), mk(cUpstream, cQGLease, 50, 2, 2*ms, 200, "1.1"),
		mk(cNginx, "", 50, 2, ms, 200, "1.0"),
		// 25 %: quotagate without any upstream run.
		mk(cQGLease, "", 25, 1, 2*ms, 100, "2.0"),
	}
	rows := aggregateOpen(samples, []string{mixOne}, []float64{25, 50}, []string{cQGLease, cNginx})
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4: %+v", len(rows), rows)
	}
	if r := rows[0]; r.Percent != 25 || r.Contender != cQGLease || r.AddedP99us != nil {
		t.Errorf("25%%: %+v; want quotagate-lease alone, no added latency without an upstream run", r)
	}
	up, qg, nginx := rows[1], rows[2], rows[3]
	if up.Contender != cUpstream || up.AddedP99us != nil || up.Requests != 600 || len(up.LoadRounds) != 3 {
		t.Errorf("upstream: %+v; want its three runs pooled first, no added latency", up)
	}
	// quotagate's runs pool to {3, 4} ms, its upstream runs' to {1, 2} ms: the
	// median of each is the lower one (p50: +2 ms) and the largest the
	// higher (p99 and p99.9: +2 ms); per round +2 ms and +2 ms.
	if !nearUS(*qg.AddedP50us, 2000) || *qg.AddedP99us != 2000 || *qg.AddedP999us != 2000 || qg.P99us != 4000 {
		t.Errorf("quotagate added %v/%v/%v, p99 %v; want +2000µs each, p99 4000", *qg.AddedP50us, *qg.AddedP99us, *qg.AddedP999us, qg.P99us)
	}
	if len(qg.AddedP99Rounds) != 2 || qg.AddedP99Rounds[0] != 2000 || qg.AddedP99Rounds[1] != 2000 {
		t.Errorf("quotagate per round %v, want [2000 2000]", qg.AddedP99Rounds)
	}
	// nginx is read against the upstream run next to it only: 5.5 - 5 ms
	// in round 1; round 2 has no upstream run of its own.
	if !nearUS(*nginx.AddedP50us, 500) || len(nginx.AddedP99Rounds) != 1 || nginx.AddedP99Rounds[0] != 500 {
		t.Errorf("nginx added p50 %v, rounds %v; want +500µs, [500]", *nginx.AddedP50us, nginx.AddedP99Rounds)
	}
	if qg.Offered != 100 || qg.Achieved != 75 || qg.LagP99us != 400 || qg.CPUus != 133.33 {
		t.Errorf("offered %v achieved %v lag %v cpu %v", qg.Offered, qg.Achieved, qg.LagP99us, qg.CPUus)
	}
	var b strings.Builder
	rep := &Report{Capacity: []Capacity{{Keys: mixOne, Contender: cQGLease, RPS: 200, RPSRounds: []float64{190, 200, 210}}}, Open: rows}
	if err := writeOpen(&b, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"capacity: quotagate-lease keys=one 200 req/s", "190 200 210", "+2.00ms +2.00ms", "+500µs", "50%", "1.5 1.2"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("open table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestOpenOrderPairsEachContenderWithAnUpstreamRun(t *testing.T) {
	name := func(rs []openRun) string {
		var parts []string
		for _, r := range rs {
			if r.pairOf != "" {
				parts = append(parts, r.name+"("+r.pairOf+")")
			} else {
				parts = append(parts, r.name)
			}
		}
		return strings.Join(parts, " ")
	}
	cs := []string{cBare, cQGLease}
	for round, want := range []string{
		"upstream(bare) bare upstream(quotagate-lease) quotagate-lease",
		"quotagate-lease upstream(quotagate-lease) bare upstream(bare)",
		"upstream(bare) bare upstream(quotagate-lease) quotagate-lease",
	} {
		if got := name(openOrder(cs, round)); got != want {
			t.Errorf("round %d: %s, want %s", round, got, want)
		}
	}
}
