package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
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
	// Latency is from sending each request to reading its whole answer in
	// the closed loop; from the time it was due in the open loop.
	Latency hist
	// Open loop only: Offered is the rate asked for (requests per second);
	// Lag is how late each request was sent after it was due; Unsent
	// counts requests still due at the drain deadline, never sent.
	Offered float64
	Lag     hist
	Unsent  uint64
}

// loadSpec describes one load run.
type loadSpec struct {
	URL      string        // request URL (GET)
	Conns    int           // concurrent connections, one worker each
	Duration time.Duration // measured time
	Warmup   time.Duration // unmeasured load before it
	Mix      string
	Auth     [][]string // {"Bearer <key>"} per key index, shared read-only
	// Rate, when > 0, makes the run an open loop (open.go): Rate requests
	// per second due at fixed times, on Conns connections.
	Rate float64
}

// runLoad drives spec.URL with spec.Conns keep-alive connections, each
// sending its next request as soon as the previous answer is read (closed
// loop), first for Warmup without measuring, then for Duration. onStart is
// called when the measured part starts, onEnd when every worker has
// finished it. A request in flight at the deadline is completed and
// counted; Elapsed runs to the last completion. With spec.Rate > 0 both
// parts are open loops at that rate instead (driveOpen).
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
	run := drive
	if spec.Rate > 0 {
		run = driveOpen
	}
	if spec.Warmup > 0 {
		if _, err := run(ctx, tr, spec, spec.Warmup, 1); err != nil {
			return nil, fmt.Errorf("warmup: %w", err)
		}
	}
	onStart()
	res, err := run(ctx, tr, spec, spec.Duration, 2)
	onEnd()
	return res, err
}

// drive runs the workers for d and merges what they measured.
func drive(ctx context.Context, tr http.RoundTripper, spec loadSpec, d time.Duration, phase uint64) (*loadResult, error) {
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
	elapsed := time.Since(start)
	res := &loadResult{}
	for i := range workers {
		res.merge(&workers[i])
	}
	res.Elapsed = elapsed
	if err := ctx.Err(); err != nil {
		return res, err
	}
	return res, nil
}

// work is one worker's loop: each request is sent when the previous
// answer has been read.
func work(ctx context.Context, tr http.RoundTripper, spec loadSpec, deadline time.Time, pick keyPicker, out *loadResult) {
	send := httpSend(ctx, tr, spec, pick)
	for ctx.Err() == nil {
		t0 := time.Now()
		if !t0.Before(deadline) {
			return
		}
		status, err := send()
		out.Latency.Record(time.Since(t0))
		out.count(status, err)
	}
}
