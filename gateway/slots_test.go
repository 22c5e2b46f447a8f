package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/ratelimit/stack"
)

// slotConfig has one concurrency policy per way of waiting: "inflight"
// (max 1, no queue) and "queued" (max 1, up to 2 waiting for 2 s), and a
// rate policy beside "queued" on the limited route.
const slotConfig = `
identity:
  api_keys:
    - {key_sha256: FREEHASH, tenant: acme, tier: free}
tiers:
  free: {}
policies:
  inflight:
    algorithm: concurrency
    limits: {free: {max: 1}}
  queued:
    algorithm: concurrency
    slot_ttl: 5s
    queue: {max: 2, timeout: 2s}
    limits: {free: {max: 1}}
  rate:
    limits: {free: {rate: 1, per: 1s, burst: 5}}
upstreams:
  app: {url: UPSTREAM, timeout: 10s}
routes:
  - {name: held, method: GET, path: "/held/{id}", upstream: app, policies: [inflight]}
  - {name: queued, method: GET, path: "/queued/{id}", upstream: app, policies: [rate, queued]}
`

// holdingUpstream answers each request only when the test releases it by
// the last segment of its path, and reports the order requests arrived in.
// A request whose last segment starts with "stream" gets its headers and
// a first line at once, the rest when released.
type holdingUpstream struct {
	srv     *httptest.Server
	arrived chan string
	mu      sync.Mutex
	gates   map[string]chan struct{}
}

func newHoldingUpstream(t *testing.T) *holdingUpstream {
	u := &holdingUpstream{arrived: make(chan string, 32), gates: map[string]chan struct{}{}}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
		if strings.HasPrefix(id, "stream") { // a response under way
			_, _ = io.WriteString(w, "start\n")
			w.(http.Flusher).Flush()
		}
		u.arrived <- id
		select {
		case <-u.gate(id):
		case <-r.Context().Done():
		}
		_, _ = w.Write([]byte("done " + id))
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *holdingUpstream) gate(id string) chan struct{} {
	u.mu.Lock()
	defer u.mu.Unlock()
	g, ok := u.gates[id]
	if !ok {
		g = make(chan struct{})
		u.gates[id] = g
	}
	return g
}

// open lets the upstream answer request id.
func (u *holdingUpstream) open(id string) { close(u.gate(id)) }

// next returns the id of the next request to arrive, failing after 10 s.
func (u *holdingUpstream) next(t *testing.T) string {
	t.Helper()
	select {
	case id := <-u.arrived:
		return id
	case <-time.After(10 * time.Second):
		t.Fatal("missed deadline: no request reached the upstream within 10 s")
		return ""
	}
}

type slotFixture struct {
	*fixture
	up *holdingUpstream
}

func newSlotFixture(t *testing.T) *slotFixture { return newSlotFixtureWith(t, Options{}) }

// newSlotFixtureWith is newSlotFixture with o's metrics and tracer.
func newSlotFixtureWith(t *testing.T, o Options) *slotFixture {
	t.Helper()
	up := newHoldingUpstream(t)
	f := &fixture{clock: newTestClock()}
	f.path = writeConfig(t, renderConfig(slotConfig, up.srv.URL, ""))
	cfg, err := config.Load(f.path, testGetenv)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	o.Now, o.After, o.Getenv = f.clock.Now, f.clock.After, testGetenv
	o.OpenStore = func(c config.Store) (*stack.Stack, error) {
		return stack.New(nil, stack.Options{Now: f.clock.Now, FleetSize: c.FleetSize}), nil
	}
	gw, err := New(cfg, o)
	if err != nil {
		t.Fatalf("gateway: %v", err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	f.gw = gw
	return &slotFixture{fixture: f, up: up}
}

// start sends a request in the background; its answer comes on the channel.
func (f *slotFixture) start(target string) <-chan *httptest.ResponseRecorder {
	ch := make(chan *httptest.ResponseRecorder, 1)
	go func() { ch <- f.do(http.MethodGet, target, map[string]string{"X-Api-Key": freeKey}, nil) }()
	return ch
}

func answer(t *testing.T, ch <-chan *httptest.ResponseRecorder) *httptest.ResponseRecorder {
	t.Helper()
	select {
	case w := <-ch:
		return w
	case <-time.After(10 * time.Second):
		t.Fatal("missed deadline: no answer within 10 s")
		return nil
	}
}

// TestConcurrencySlotHeldUntilResponseEnds: a request holds its slot while
// the upstream works on it; a second one is refused 429 with the policy,
// the in-flight headers and a Retry-After; once the first response is done
// and its slot released, the next request is admitted.
func TestConcurrencySlotHeldUntilResponseEnds(t *testing.T) {
	f := newSlotFixture(t)
	first := f.start("/held/a")
	if id := f.up.next(t); id != "a" {
		t.Fatalf("upstream got %q", id)
	}
	if n := f.gw.slots.inflightOf("inflight"); n != 1 {
		t.Errorf("in flight = %d, want 1", n)
	}
	w := f.do(http.MethodGet, "/held/b", map[string]string{"X-Api-Key": freeKey}, nil)
	body := problemBody(t, w, http.StatusTooManyRequests, codeRateLimited)
	if body["policy"] != "inflight" {
		t.Errorf("policy = %v, want inflight", body["policy"])
	}
	if got := w.Header().Get("Ratelimit-Policy"); got != `"inflight";q=1` {
		t.Errorf("RateLimit-Policy = %q", got)
	}
	if got := w.Header().Get("Ratelimit"); got != `"inflight";r=0` {
		t.Errorf("RateLimit = %q", got)
	}
	// The slot expires 30 s after it was taken, unless renewed: the
	// Retry-After is at least that, plus jitter.
	if ra := w.Header().Get("Retry-After"); ra < "30" || len(ra) > 2 {
		t.Errorf("Retry-After = %q, want 30 to 38 s", ra)
	}
	f.up.open("a")
	if w := answer(t, first); w.Code != http.StatusOK || w.Body.String() != "done a" {
		t.Fatalf("first: %d %q", w.Code, w.Body.String())
	}
	f.gw.slots.keeper.Wait()
	if n := f.gw.slots.inflightOf("inflight"); n != 0 {
		t.Errorf("in flight after the response = %d, want 0", n)
	}
	third := f.start("/held/c")
	if id := f.up.next(t); id != "c" {
		t.Fatalf("upstream got %q", id)
	}
	f.up.open("c")
	if w := answer(t, third); w.Code != http.StatusOK {
		t.Fatalf("after the release: %d %s", w.Code, w.Body.String())
	}
}

// TestConcurrencyQueueServesInOrderAndTimesOutExactly: with one slot and a
// queue of 2, requests that find the slot taken wait and are admitted in
// the order they came as slots free; a third waiter is refused at once
// (queue full); a waiter is refused exactly when its timeout has passed on
// the gateway's clock, and not a moment before.
func TestConcurrencyQueueServesInOrderAndTimesOutExactly(t *testing.T) {
	f := newSlotFixture(t)
	waiting := func(n int) {
		t.Helper()
		if !f.gw.slots.queues.await(n, 10*time.Second) {
			t.Fatalf("missed deadline: %d requests never waited within 10 s", n)
		}
	}

	a := f.start("/queued/a")
	if id := f.up.next(t); id != "a" {
		t.Fatalf("upstream got %q", id)
	}
	b := f.start("/queued/b")
	waiting(1)
	c := f.start("/queued/c")
	waiting(2)
	// The queue is full: refused at once, without waiting.
	w := f.do(http.MethodGet, "/queued/d", map[string]string{"X-Api-Key": freeKey}, nil)
	if body := problemBody(t, w, http.StatusTooManyRequests, codeRateLimited); body["policy"] != "queued" {
		t.Errorf("queue full: policy %v", body["policy"])
	}

	f.up.open("a")
	if w := answer(t, a); w.Code != http.StatusOK {
		t.Fatalf("a: %d", w.Code)
	}
	if id := f.up.next(t); id != "b" {
		t.Fatalf("after a, upstream got %q, want b (first in the queue)", id)
	}
	f.up.open("b")
	if w := answer(t, b); w.Code != http.StatusOK {
		t.Fatalf("b: %d", w.Code)
	}
	if id := f.up.next(t); id != "c" {
		t.Fatalf("after b, upstream got %q, want c", id)
	}

	// c holds the slot; e waits for its full timeout of 2 s.
	e := f.start("/queued/e")
	waiting(1)
	f.clock.Add(2*time.Second - time.Millisecond)
	select {
	case w := <-e:
		t.Fatalf("e answered %d before its timeout", w.Code)
	default:
	}
	f.clock.Add(time.Millisecond)
	if w := answer(t, e); w.Code != http.StatusTooManyRequests {
		t.Fatalf("e after its timeout: %d %s", w.Code, w.Body.String())
	}
	f.up.open("c")
	if w := answer(t, c); w.Code != http.StatusOK {
		t.Fatalf("c: %d", w.Code)
	}
}

// TestConcurrencyRateDenialDoesNotQueue: a request that a rate policy
// denies is refused at once, even when its slot is taken too, and takes no
// slot.
func TestConcurrencyRateDenialDoesNotQueue(t *testing.T) {
	f := newSlotFixture(t)
	for i := range 5 { // spend the rate policy's burst
		id := string(rune('a' + i))
		ch := f.start("/queued/" + id)
		if got := f.up.next(t); got != id {
			t.Fatalf("upstream got %q", got)
		}
		f.up.open(id)
		if w := answer(t, ch); w.Code != http.StatusOK {
			t.Fatalf("%s: %d", id, w.Code)
		}
		f.gw.slots.keeper.Wait()
	}
	w := f.do(http.MethodGet, "/queued/z", map[string]string{"X-Api-Key": freeKey}, nil)
	if body := problemBody(t, w, http.StatusTooManyRequests, codeRateLimited); body["policy"] != "rate" {
		t.Errorf("policy %v, want rate", body["policy"])
	}
	// One unit refills in 1 s, long before a slot taken by z would expire
	// (5 s): the next request finds the slot free, so z took none.
	f.clock.Add(time.Second)
	y := f.start("/queued/y")
	if got := f.up.next(t); got != "y" {
		t.Fatalf("upstream got %q", got)
	}
	f.up.open("y")
	if w := answer(t, y); w.Code != http.StatusOK {
		t.Fatalf("y: %d", w.Code)
	}
	if n := f.gw.slots.inflightOf("queued"); n != 0 {
		t.Errorf("in flight = %d after a rate denial, want 0", n)
	}
}

// TestConcurrencyQuotaEndpoint: the quota endpoint reports a concurrency
// policy's free slots, taking none.
func TestConcurrencyQuotaEndpoint(t *testing.T) {
	f := newSlotFixture(t)
	remaining := func() (limit, left float64) {
		t.Helper()
		w := f.do(http.MethodGet, "/_quota", map[string]string{"X-Api-Key": freeKey}, nil)
		var body struct {
			Policies []struct {
				Name      string  `json:"name"`
				Limit     float64 `json:"limit"`
				Remaining float64 `json:"remaining"`
				WindowS   float64 `json:"window_s"`
			} `json:"policies"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != http.StatusOK {
			t.Fatalf("quota: %d %s", w.Code, w.Body.String())
		}
		for _, p := range body.Policies {
			if p.Name == "inflight" {
				if p.WindowS != 0 {
					t.Errorf("window_s = %v, want 0", p.WindowS)
				}
				return p.Limit, p.Remaining
			}
		}
		t.Fatalf("no inflight policy in %s", w.Body.String())
		return 0, 0
	}
	if l, r := remaining(); l != 1 || r != 1 {
		t.Errorf("idle: limit %v remaining %v, want 1 and 1", l, r)
	}
	a := f.start("/held/a")
	f.up.next(t)
	if _, r := remaining(); r != 0 {
		t.Errorf("while a request holds the slot: remaining %v, want 0", r)
	}
	f.up.open("a")
	answer(t, a)
	f.gw.slots.keeper.Wait()
	if _, r := remaining(); r != 1 {
		t.Errorf("after the response: remaining %v, want 1 (reading took no slot)", r)
	}
}
