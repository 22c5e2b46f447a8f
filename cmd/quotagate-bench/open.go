package main

import (
	"context"
	"io"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// The open loop: requests are due at a constant offered rate whatever the
// contender does, and each one's latency runs from the time it was due,
// not from the time it was sent. A closed loop (load.go) sends the next
// request only when the previous answer is in, so a contender that stalls
// also stalls the load, and the requests that would have queued behind
// the stall are never sent and never measured (coordinated omission). Here
// a request that could not be sent on time, because every connection was
// still waiting, is sent as soon as one is free, and the wait counts in
// its latency.

// clock is the time source of the open loop; tests inject one.
type clock interface {
	Now() time.Time
	// SleepUntil returns at t or later, or sooner when ctx is done.
	SleepUntil(ctx context.Context, t time.Time)
}

// wallClock is the machine's clock.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) SleepUntil(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-ctx.Done():
	}
}

// schedule is a constant offered rate: request k (from 0) is due at
// start + k/rate, for the n requests due before start + d.
type schedule struct {
	start time.Time
	rate  float64 // requests per second, > 0
	n     uint64
}

// newSchedule returns the schedule of rate requests per second over
// [start, start+d).
func newSchedule(start time.Time, rate float64, d time.Duration) schedule {
	return schedule{start: start, rate: rate, n: uint64(math.Ceil(d.Seconds() * rate))}
}

// due returns when request k is due. It is computed from k, not by adding
// intervals, so that rounding does not drift over a long run.
func (s schedule) due(k uint64) time.Time {
	return s.start.Add(time.Duration(float64(k) * 1e9 / s.rate))
}

// sendFunc sends one request and reads its whole answer, returning the
// status (0 with a transport error).
type sendFunc func() (status int, err error)

// openWorker is one connection of the open loop. Workers share next, the
// index of the next request of s not yet taken: each takes one, waits
// until it is due (not at all when it is already late), sends it and
// takes the next, so that a request due while every worker is busy goes
// out with the first worker to come free. Latency is recorded from the
// due time; out.Lag records how late each request was sent. A request
// taken at or after stop (the drain deadline) is not sent: it counts in
// out.Unsent and, with the time from its due time to when it was given
// up, in out.Latency (a lower bound of what it would have waited).
// out.Elapsed is set to the time from s.start to the worker's last
// completion.
func openWorker(ctx context.Context, clk clock, s schedule, next *atomic.Uint64, stop time.Time, send sendFunc, out *loadResult) {
	for ctx.Err() == nil {
		k := next.Add(1) - 1
		if k >= s.n {
			return
		}
		due := s.due(k)
		clk.SleepUntil(ctx, due)
		if ctx.Err() != nil {
			return
		}
		now := clk.Now()
		if !now.Before(stop) {
			out.Unsent++
			out.Latency.Record(now.Sub(due))
			continue
		}
		out.Lag.Record(now.Sub(due))
		status, err := send()
		done := clk.Now()
		out.Latency.Record(done.Sub(due))
		out.count(status, err)
		out.Elapsed = max(out.Elapsed, done.Sub(s.start))
	}
}

// count adds one answered (or failed) request to r by its status.
func (r *loadResult) count(status int, err error) {
	r.Requests++
	switch {
	case err != nil:
		r.Errors++
	case status == http.StatusOK:
		r.OK++
	case status == http.StatusTooManyRequests:
		r.Limited++
	default:
		r.Other++
	}
}

// openDrain is how long after the schedule's end requests still due are
// sent: half the measured time, at least a second. A contender that
// cannot keep up leaves the rest unsent.
func openDrain(d time.Duration) time.Duration { return max(d/2, time.Second) }

// openLoop runs the schedule of rate requests per second over d from
// clk.Now() on workers connections, each worker sending through the
// sendFunc that newSend makes for it, and merges what they measured.
// Elapsed is at least d.
func openLoop(ctx context.Context, clk clock, rate float64, d time.Duration, workers int, newSend func(worker int) sendFunc) *loadResult {
	start := clk.Now()
	s := newSchedule(start, rate, d)
	stop := start.Add(d + openDrain(d))
	outs := make([]loadResult, workers)
	var next atomic.Uint64
	var wg sync.WaitGroup
	for i := range outs {
		send := newSend(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			openWorker(ctx, clk, s, &next, stop, send, &outs[i])
		}()
	}
	wg.Wait()
	res := &loadResult{Offered: rate, Elapsed: d}
	for i := range outs {
		res.merge(&outs[i])
	}
	return res
}

// merge adds o's counts and histograms to r; Elapsed is the larger.
func (r *loadResult) merge(o *loadResult) {
	r.Requests += o.Requests
	r.OK += o.OK
	r.Limited += o.Limited
	r.Other += o.Other
	r.Errors += o.Errors
	r.Unsent += o.Unsent
	r.Latency.Merge(&o.Latency)
	r.Lag.Merge(&o.Lag)
	r.Elapsed = max(r.Elapsed, o.Elapsed)
}

// httpSend returns a sendFunc that GETs spec.URL through tr with a key of
// spec.Mix picked by pick. It reuses one request, which is allowed once
// the previous response body is closed.
func httpSend(ctx context.Context, tr http.RoundTripper, spec loadSpec, pick keyPicker) sendFunc {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, spec.URL, nil)
	return func() (int, error) {
		if err != nil {
			return 0, err
		}
		req.Header["Authorization"] = spec.Auth[pick()]
		resp, err := tr.RoundTrip(req)
		if err != nil {
			return 0, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, err
	}
}

// driveOpen runs the open loop at spec.Rate for d on tr with spec.Conns
// workers, with key pickers seeded by phase as drive seeds them.
func driveOpen(ctx context.Context, tr http.RoundTripper, spec loadSpec, d time.Duration, phase uint64) (*loadResult, error) {
	pickers := make([]keyPicker, spec.Conns)
	for i := range pickers {
		p, err := newPicker(spec.Mix, phase<<32|uint64(i))
		if err != nil {
			return nil, err
		}
		pickers[i] = p
	}
	res := openLoop(ctx, wallClock{}, spec.Rate, d, spec.Conns, func(i int) sendFunc {
		return httpSend(ctx, tr, spec, pickers[i])
	})
	return res, ctx.Err()
}
