package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// requestTimeout is how long a client waits for an answer; a request without
// one by then counts as unanswered.
const requestTimeout = 5 * time.Second

// call is one request a load worker sends.
type call struct {
	label  string // groups results: a route, a tenant class, a gateway
	base   string // gateway URL
	method string
	path   string
	key    string // API key sent as X-API-Key; "" = none
	cost   int64  // units the request takes when admitted (default 1)
	header map[string]string
}

// outcome is what one call came to.
type outcome struct {
	call
	status     int   // 0 when unanswered
	err        error // transport error (unanswered)
	start, end time.Time
	header     http.Header
	body       []byte
}

func (o outcome) latency() time.Duration { return o.end.Sub(o.start) }

// load describes a bounded load run: workers run concurrently until each has
// sent perWorker requests (0 = no count limit) or duration has passed (0 =
// no time limit; then perWorker must be > 0).
type load struct {
	workers   int
	perWorker int
	duration  time.Duration
	next      func(worker, i int) call
	// pace is the pause a worker takes after each request (0 = none); it
	// shapes the offered load.
	pace time.Duration
	// keepBody keeps response bodies of non-2xx answers (for checks).
	keepBody bool
}

// newClient returns a client for n concurrent workers with keep-alive
// connections and no redirects; every request is bounded by requestTimeout.
func newClient(n int) *http.Client {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		MaxIdleConns:        n * 2,
		MaxIdleConnsPerHost: n,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       requestTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// run executes l and returns every outcome. All workers start together.
func (l load) run(t testing.TB) []outcome {
	t.Helper()
	if l.perWorker <= 0 && l.duration <= 0 {
		t.Fatal("load: unbounded run")
	}
	client := newClient(l.workers)
	defer client.CloseIdleConnections()
	results := make([][]outcome, l.workers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	var stopAt time.Time
	for w := range l.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; l.perWorker <= 0 || i < l.perWorker; i++ {
				if l.duration > 0 && time.Now().After(stopAt) {
					return
				}
				results[w] = append(results[w], do(client, l.next(w, i), l.keepBody))
				if l.pace > 0 {
					time.Sleep(l.pace) // shapes the offered load
				}
			}
		}()
	}
	stopAt = time.Now().Add(l.duration)
	close(start)
	wg.Wait()
	var out []outcome
	for _, r := range results {
		out = append(out, r...)
	}
	return out
}

// do sends c and reads the whole answer.
func do(client *http.Client, c call, keepBody bool) outcome {
	o := outcome{call: c}
	if o.cost == 0 {
		o.cost = 1
	}
	method := c.method
	if method == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequest(method, c.base+c.path, nil)
	if err != nil {
		o.err = err
		return o
	}
	if c.key != "" {
		req.Header.Set("X-API-Key", c.key)
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	o.start = time.Now()
	resp, err := client.Do(req)
	if err != nil {
		o.end, o.err = time.Now(), err
		return o
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	o.end = time.Now()
	if err != nil {
		o.err = err
		return o
	}
	o.status, o.header = resp.StatusCode, resp.Header
	if keepBody || resp.StatusCode >= 300 {
		o.body = body
	}
	return o
}

// summary aggregates outcomes.
type summary struct {
	n          int
	status     map[int]int
	unanswered int
	firstErr   error
	lat        []time.Duration // sorted
	admitted   int64           // units of the 2xx answers
	// Span of the requests: earliest start and end, latest start and end.
	firstStart, firstEnd, lastStart, lastEnd time.Time
}

// summarize aggregates the outcomes for which keep returns true (nil = all).
func summarize(outs []outcome, keep func(outcome) bool) summary {
	s := summary{status: map[int]int{}}
	for _, o := range outs {
		if keep != nil && !keep(o) {
			continue
		}
		s.n++
		if o.err != nil || o.status == 0 {
			s.unanswered++
			if s.firstErr == nil {
				s.firstErr = o.err
			}
		} else {
			s.status[o.status]++
		}
		if o.status >= 200 && o.status < 300 {
			s.admitted += o.cost
		}
		s.lat = append(s.lat, o.latency())
		if s.firstStart.IsZero() || o.start.Before(s.firstStart) {
			s.firstStart = o.start
		}
		if s.firstEnd.IsZero() || o.end.Before(s.firstEnd) {
			s.firstEnd = o.end
		}
		if o.start.After(s.lastStart) {
			s.lastStart = o.start
		}
		if o.end.After(s.lastEnd) {
			s.lastEnd = o.end
		}
	}
	slices.Sort(s.lat)
	return s
}

// byLabel keeps the outcomes with label l.
func byLabel(l string) func(outcome) bool {
	return func(o outcome) bool { return o.label == l }
}

// worst is the longest latency.
func (s summary) worst() time.Duration {
	if len(s.lat) == 0 {
		return 0
	}
	return s.lat[len(s.lat)-1]
}

// pct returns the p-th percentile latency (0 < p <= 100).
func (s summary) pct(p float64) time.Duration {
	if len(s.lat) == 0 {
		return 0
	}
	i := int(float64(len(s.lat))*p/100+0.5) - 1
	i = max(0, min(i, len(s.lat)-1))
	return s.lat[i]
}

// mix renders the status counts as "200:812 503:40", unanswered last.
func (s summary) mix() string {
	codes := make([]int, 0, len(s.status))
	for c := range s.status {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	var b strings.Builder
	for _, c := range codes {
		fmt.Fprintf(&b, "%d:%d ", c, s.status[c])
	}
	if s.unanswered > 0 {
		fmt.Fprintf(&b, "unanswered:%d", s.unanswered)
	}
	return strings.TrimSpace(b.String())
}

// only reports whether every answered request got one of codes.
func (s summary) only(codes ...int) bool {
	for c := range s.status {
		if !slices.Contains(codes, c) {
			return false
		}
	}
	return true
}

// tokenBucketBounds returns the least and most units a token bucket of
// burst and rate units per second may admit to saturating traffic s. The
// decisions happened within [firstStart, lastEnd] (upper bound) and span at
// least [firstEnd, lastStart] (lower bound). slack covers a fractional unit
// at either edge and a request's cost, on both sides: requests of cost c can
// leave up to c-1 units in the bucket that no request of theirs fits.
func tokenBucketBounds(s summary, burst int64, ratePerSec float64, slack int64) (lo, hi int64) {
	maxSpan := s.lastEnd.Sub(s.firstStart).Seconds()
	minSpan := max(0, s.lastStart.Sub(s.firstEnd).Seconds())
	hi = burst + int64(ratePerSec*maxSpan) + slack
	lo = int64(0.99*(float64(burst)+ratePerSec*minSpan)) - slack
	return lo, hi
}
