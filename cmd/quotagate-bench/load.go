package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// numKeys is how many API keys the bench generates and configures.
const numKeys = 10000

// Key mixes: which API key each request carries.
const (
	mixOne     = "one"     // every request: key 0 (one tenant)
	mixUniform = "uniform" // uniform over all numKeys keys
	mixZipf    = "zipf"    // Zipf (s=1.1) over all keys: a few hot tenants, a long tail
)

var allMixes = []string{mixOne, mixUniform, mixZipf}

// benchKey returns API key i: the hex SHA-256 of "bench-key-<i>", so that
// every run uses the same keys.
func benchKey(i int) string {
	s := sha256.Sum256([]byte("bench-key-" + strconv.Itoa(i)))
	return hex.EncodeToString(s[:])
}

// keyHash is what a quotagate config lists for key: its hex SHA-256.
func keyHash(key string) string {
	s := sha256.Sum256([]byte(key))
	return hex.EncodeToString(s[:])
}

// keyPicker picks key indexes for one worker; it is not safe for
// concurrent use.
type keyPicker func() int

// newPicker returns a picker for mix seeded with seed. Unknown mixes are an
// error.
func newPicker(mix string, seed uint64) (keyPicker, error) {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	switch mix {
	case mixOne:
		return func() int { return 0 }, nil
	case mixUniform:
		return func() int { return r.IntN(numKeys) }, nil
	case mixZipf:
		z := rand.NewZipf(r, 1.1, 1, numKeys-1)
		return func() int { return int(z.Uint64()) }, nil
	}
	return nil, fmt.Errorf("unknown key mix %q (want one, uniform or zipf)", mix)
}

// loadResult is what one load run measured.
type loadResult struct {
	Elapsed  time.Duration
	Requests uint64
	OK       uint64 // 200
	Limited  uint64 // 429
	Other    uint64 // any other status
	Errors   uint64 // transport errors (no status)
	Latency  hist
}

// loadSpec describes one load run.
type loadSpec struct {
	URL      string        // request URL (GET)
	Conns    int           // concurrent connections, one worker each
	Duration time.Duration // measured time
	Warmup   time.Duration // unmeasured load before it
	Mix      string
	Auth     [][]string // {"Bearer <key>"} per key index, shared read-only
}

// runLoad drives spec.URL with spec.Conns keep-alive connections, each
// sending its next request as soon as the previous answer is read (closed
// loop), first for Warmup without measuring, then for Duration. onStart is
// called when the measured part starts, onEnd when every worker has
// finished it. A request in flight at the deadline is completed and
// counted; Elapsed runs to the last completion.
func runLoad(ctx context.Context, spec loadSpec, onStart, onEnd func()) (*loadResult, error) {
	tr := &http.Transport{
		MaxConnsPerHost:     spec.Conns,
		MaxIdleConns:        spec.Conns,
		MaxIdleConnsPerHost: spec.Conns,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	defer tr.CloseIdleConnections()
	if spec.Warmup > 0 {
		if _, err := drive(ctx, tr, spec, spec.Warmup, 1); err != nil {
			return nil, fmt.Errorf("warmup: %w", err)
		}
	}
	onStart()
	res, err := drive(ctx, tr, spec, spec.Duration, 2)
	onEnd()
	return res, err
}

// drive runs the workers for d and merges what they measured.
func drive(ctx context.Context, tr *http.Transport, spec loadSpec, d time.Duration, phase uint64) (*loadResult, error) {
	workers := make([]loadResult, spec.Conns)
	pickers := make([]keyPicker, spec.Conns)
	for i := range pickers {
		p, err := newPicker(spec.Mix, phase<<32|uint64(i))
		if err != nil {
			return nil, err
		}
		pickers[i] = p
	}
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work(ctx, tr, spec, deadline, pickers[i], &workers[i])
		}()
	}
	wg.Wait()
	res := &loadResult{Elapsed: time.Since(start)}
	for i := range workers {
		w := &workers[i]
		res.Requests += w.Requests
		res.OK += w.OK
		res.Limited += w.Limited
		res.Other += w.Other
		res.Errors += w.Errors
		res.Latency.Merge(&w.Latency)
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	return res, nil
}

// work is one worker's loop. It reuses one request, which is allowed once
// the previous response body is closed.
func work(ctx context.Context, tr *http.Transport, spec loadSpec, deadline time.Time, pick keyPicker, out *loadResult) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, spec.URL, nil)
	if err != nil {
		out.Errors++
		return
	}
	for ctx.Err() == nil {
		t0 := time.Now()
		if !t0.Before(deadline) {
			return
		}
		req.Header["Authorization"] = spec.Auth[pick()]
		resp, err := tr.RoundTrip(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		out.Latency.Record(time.Since(t0))
		out.Requests++
		switch {
		case err != nil:
			out.Errors++
		case resp.StatusCode == http.StatusOK:
			out.OK++
		case resp.StatusCode == http.StatusTooManyRequests:
			out.Limited++
		default:
			out.Other++
		}
	}
}
