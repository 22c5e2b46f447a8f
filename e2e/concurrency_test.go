package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/internal/redistest"
)

// slotUpstream is an upstream that counts the requests it is working on
// at once, and remembers the most it ever had:
//
//   - /slow/... answers after 100 ms (the work of a slow upstream);
//   - /hang/... answers when the test releases it or the caller leaves;
//   - /stream/<ms>... streams a line every 100 ms for that many ms;
//   - anything else answers at once.
type slotUpstream struct {
	srv     *httptest.Server
	now     atomic.Int64
	peak    atomic.Int64
	release chan struct{}
	once    sync.Once
	arrived chan struct{}
}

func startSlotUpstream(t *testing.T) *slotUpstream {
	u := &slotUpstream{release: make(chan struct{}), arrived: make(chan struct{}, 64)}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := u.now.Add(1)
		defer u.now.Add(-1)
		for p := u.peak.Load(); n > p && !u.peak.CompareAndSwap(p, n); p = u.peak.Load() {
		}
		first, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		switch first {
		case "slow":
			time.Sleep(100 * time.Millisecond) // the upstream's own work
		case "hang":
			u.arrived <- struct{}{}
			select {
			case <-u.release:
			case <-r.Context().Done():
			}
		case "stream":
			var ms int
			fmt.Sscanf(rest, "%d", &ms)
			end := time.Now().Add(time.Duration(ms) * time.Millisecond)
			for time.Now().Before(end) {
				if _, err := fmt.Fprintln(w, "tick"); err != nil {
					return
				}
				http.NewResponseController(w).Flush()
				time.Sleep(100 * time.Millisecond) // the stream's pace
			}
		}
		_, _ = io.WriteString(w, "done\n")
	}))
	t.Cleanup(func() {
		u.once.Do(func() { close(u.release) })
		u.srv.CloseClientConnections()
		u.srv.Close()
	})
	return u
}

// slotConfig is limiterConfig with a concurrency policy "inflight" of max
// slots and slot_ttl ttl for tenant acme, on every route.
func slotConfig(upstreamURL string, addrs []string, max int64, ttl string) *gwConfig {
	c := limiterConfig(upstreamURL, addrs, "acme")
	c.Upstreams["up"] = upstreamCfg{URL: upstreamURL, Timeout: "30s"}
	c.Policies["inflight"] = policyCfg{Algorithm: "concurrency", SlotTTL: ttl, OnStoreError: "closed",
		Limits: map[string]limitCfg{"std": {Max: max}}}
	c.route("all", "GET", "/{rest...}", 1, "inflight")
	return c
}

// slotGet sends GET path with acme's key and returns the status and the
// body (read to its end); a transport failure is status 0 with the error.
// It is safe to call from any goroutine.
func slotGet(base, path string) (int, http.Header, string) {
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		return 0, nil, err.Error()
	}
	req.Header.Set("X-Api-Key", "key-acme")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return 0, nil, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestConcurrencyFleetNeverExceedsMax: two gateways share Redis; 10
// workers send 40 requests of one tenant, spread over both, to an upstream
// that takes 100 ms each. The upstream itself never counts more than the
// policy's max of 2 at once, and the requests over it are refused 429 by
// the policy with its in-flight headers.
func TestConcurrencyFleetNeverExceedsMax(t *testing.T) {
	rs := redistest.StartStandalone(t)
	up := startSlotUpstream(t)
	gws := startGateways(t, 2, slotConfig(up.srv.URL, []string{rs.Addr}, 2, "5s"))

	var mu sync.Mutex
	status := map[int]int{}
	var denied http.Header
	var wg sync.WaitGroup
	for w := range 10 {
		wg.Go(func() {
			for i := range 4 {
				code, h, _ := slotGet(roundRobin(gws, w, i).URL, fmt.Sprintf("/slow/%d", w))
				mu.Lock()
				status[code]++
				if code == http.StatusTooManyRequests && denied == nil {
					denied = h
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("status mix %v, upstream peak %d", status, up.peak.Load())
	if p := up.peak.Load(); p > 2 {
		t.Errorf("the upstream had %d requests of the tenant at once, max is 2", p)
	}
	if status[200] == 0 || status[200]+status[429] != 40 {
		t.Errorf("status mix %v, want 200s and 429s only, some admitted", status)
	}
	if denied != nil {
		if denied.Get("RateLimit-Policy") != `"inflight";q=2` || denied.Get("RateLimit") != `"inflight";r=0` || denied.Get("Retry-After") == "" {
			t.Errorf("429 headers: RateLimit-Policy %q RateLimit %q Retry-After %q",
				denied.Get("RateLimit-Policy"), denied.Get("RateLimit"), denied.Get("Retry-After"))
		}
	}
	// Every slot is given back once the responses are done.
	deadline := time.Now().Add(10 * time.Second)
	for gws[0].metric("quotagate_inflight", "policy=inflight")+gws[1].metric("quotagate_inflight", "policy=inflight") != 0 {
		if time.Now().After(deadline) {
			proctest.FatalOverrun(t, "quotagate_inflight stayed above 0 for 10 s after the last response")
		}
		time.Sleep(20 * time.Millisecond) // polling external processes
	}
}

// TestConcurrencySlotsOfKilledGatewayReturn: a gateway holding both slots
// of a tenant is killed with SIGKILL; the other gateway refuses the tenant
// until the slots expire, which is within slot_ttl (2 s) of the kill,
// since the dead gateway renewed them at most a third of slot_ttl before.
func TestConcurrencySlotsOfKilledGatewayReturn(t *testing.T) {
	const ttl = 2 * time.Second
	rs := redistest.StartStandalone(t)
	up := startSlotUpstream(t)
	gws := startGateways(t, 2, slotConfig(up.srv.URL, []string{rs.Addr}, 2, "2s"))
	victim, survivor := gws[0], gws[1]

	for i := range 2 {
		go slotGet(victim.URL, fmt.Sprintf("/hang/%d", i))
	}
	for range 2 {
		select {
		case <-up.arrived:
		case <-time.After(10 * time.Second):
			proctest.FatalOverrun(t, "the held requests did not reach the upstream within 10 s")
		}
	}
	if code, _, body := slotGet(survivor.URL, "/quick"); code != http.StatusTooManyRequests {
		t.Fatalf("with both slots held on the other gateway: %d %s, want 429", code, body)
	}
	// Hold the slots over more than one renewal before the kill.
	time.Sleep(ttl) // lets renewals run; the assertion is on what follows
	if code, _, _ := slotGet(survivor.URL, "/quick"); code != http.StatusTooManyRequests {
		t.Fatalf("slots held past slot_ttl were not renewed: %d, want 429", code)
	}

	victim.proc.Signal(syscall.SIGKILL)
	killed := time.Now()
	var freedAfter time.Duration
	polls := 0
	for {
		code, _, body := slotGet(survivor.URL, "/quick")
		at := time.Since(killed)
		polls++
		if code == http.StatusOK {
			freedAfter = at
			break
		}
		if code != http.StatusTooManyRequests {
			t.Fatalf("after the kill: %d %s", code, body)
		}
		if at > 10*ttl {
			t.Fatalf("the killed gateway's slots were still held %v after the kill (slot_ttl %v)", at, ttl)
		}
		time.Sleep(50 * time.Millisecond) // polling an external process
	}
	t.Logf("slots free %v after SIGKILL (slot_ttl %v, %d polls)", freedAfter, ttl, polls)
	if polls == 1 && freedAfter < ttl/2 {
		t.Errorf("slots were free %v after the kill: the dead gateway's slots were given back early", freedAfter)
	}
	if freedAfter > ttl+time.Second {
		proctest.Overrun(t, "slots came back %v after the kill, want within slot_ttl %v (+1 s to poll)", freedAfter, ttl)
	}
}

// TestConcurrencyStreamOutlivesSlotTTL: a response streamed for 5 s, more
// than twice slot_ttl (2 s), keeps its slot the whole time: requests through
// the other gateway are refused while it streams, and admitted once it is
// done.
func TestConcurrencyStreamOutlivesSlotTTL(t *testing.T) {
	rs := redistest.StartStandalone(t)
	up := startSlotUpstream(t)
	gws := startGateways(t, 2, slotConfig(up.srv.URL, []string{rs.Addr}, 1, "2s"))

	req, _ := http.NewRequest(http.MethodGet, gws[0].URL+"/stream/5000", nil)
	req.Header.Set("X-Api-Key", "key-acme")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	start := time.Now()
	lines := make(chan string, 128)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	probes := 0
	for line := range lines {
		if line == "done" {
			break
		}
		if time.Since(start) < 4500*time.Millisecond && probes < int(time.Since(start)/(300*time.Millisecond)) {
			probes++
			if code, _, body := slotGet(gws[1].URL, "/quick"); code != http.StatusTooManyRequests {
				t.Fatalf("%v into the stream: another request got %d %s, want 429 (the stream's slot was lost)", time.Since(start), code, body)
			}
		}
	}
	streamed := time.Since(start)
	t.Logf("streamed for %v, %d probes refused", streamed, probes)
	if probes < 10 {
		proctest.Overrun(t, "only %d probes ran during the %v stream, want at least 10", probes, streamed)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _, _ := slotGet(gws[1].URL, "/quick")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			proctest.FatalOverrun(t, "the stream's slot was not back 10 s after the stream ended (last answer %d)", code)
		}
		time.Sleep(20 * time.Millisecond) // polling an external process
	}
}

// TestConcurrencyLocalShareWhileRedisDown: with Redis killed, a concurrency
// policy with on_store_error local holds this instance's share of max (max
// 4 over fleet_size 2: 2 slots): a third request is refused 429 by the
// policy, and a slot freed on this instance admits the next one.
func TestConcurrencyLocalShareWhileRedisDown(t *testing.T) {
	rs := redistest.StartStandalone(t)
	up := startSlotUpstream(t)
	cfg := slotConfig(up.srv.URL, []string{rs.Addr}, 4, "2s")
	cfg.Store.FleetSize = 2
	pol := cfg.Policies["inflight"]
	pol.OnStoreError = "local"
	cfg.Policies["inflight"] = pol
	start := time.Now()
	gw := startGateway(t, "gw", cfg)
	rs.Kill()
	t.Logf("started and killed Redis after %v", time.Since(start))

	type answer struct {
		code int
		body string
	}
	answers := make(chan answer, 3)
	for i := range 3 {
		go func() {
			code, _, body := slotGet(gw.URL, fmt.Sprintf("/hang/%d", i))
			answers <- answer{code, body}
		}()
	}
	for range 2 {
		select {
		case <-up.arrived:
		case <-time.After(15 * time.Second):
			proctest.FatalOverrun(t, "two requests did not reach the upstream within 15 s of the outage")
		}
	}
	select {
	case a := <-answers:
		if a.code != http.StatusTooManyRequests || !strings.Contains(a.body, `"inflight"`) {
			t.Fatalf("the request beyond the local share: %d %s, want 429 by inflight", a.code, a.body)
		}
	case <-time.After(15 * time.Second):
		proctest.FatalOverrun(t, "the request beyond the local share was not answered within 15 s")
	}
	select {
	case <-up.arrived:
		t.Fatal("a third request reached the upstream: the local share of 2 was exceeded")
	default:
	}
	t.Logf("share reached after %v", time.Since(start))
	up.once.Do(func() { close(up.release) })
	for range 2 {
		if a := <-answers; a.code != http.StatusOK {
			t.Fatalf("held request: %d %s", a.code, a.body)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for gw.metric("quotagate_inflight", "policy=inflight") != 0 {
		if time.Now().After(deadline) {
			proctest.FatalOverrun(t, "local slots still counted 10 s after their responses")
		}
		time.Sleep(20 * time.Millisecond) // polling an external process
	}
	t.Logf("slots freed after %v", time.Since(start))
	if code, _, body := slotGet(gw.URL, "/quick"); code != http.StatusOK {
		t.Fatalf("after the local slots were freed: %d %s, want 200", code, body)
	}
}

// TestConcurrencyClusterNeverExceedsMax: two gateways share a 3-primary
// Redis Cluster; a tenant's policy allows 2 requests in flight, with a
// queue of 3 per gateway. Two requests hold both slots at the upstream;
// 10 more come, 5 through each gateway: on each, 3 wait in the queue and 2
// are refused 429 at once by the policy (queue full). Once the held
// requests end, the waiting ones are admitted, never more than 2 at the
// upstream at once, across both gateways, and every slot is released in
// the Cluster. A 503 (the policy fails closed) is a finding unless the
// gateway counted store timeouts: then it is a missed deadline.
func TestConcurrencyClusterNeverExceedsMax(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	up := startSlotUpstream(t)
	cfg := slotConfig(up.srv.URL, nil, 2, "3s")
	cfg.useRedis("1s", cl.Addrs()...)
	pol := cfg.Policies["inflight"]
	pol.Queue = &queueCfg{Max: 3, Timeout: "20s"}
	cfg.Policies["inflight"] = pol
	gws := startGateways(t, 2, cfg)

	type answer struct {
		path string
		code int
		body string
	}
	answers := make(chan answer, 12)
	get := func(gw *gateway, path string) {
		code, _, body := slotGet(gw.URL, path)
		answers <- answer{path, code, body}
	}
	timedOut := func() bool {
		return gws[0].metric("quotagate_store_errors_total", "kind=timeout")+gws[1].metric("quotagate_store_errors_total", "kind=timeout") > 0
	}
	next := func(what string) answer {
		t.Helper()
		select {
		case a := <-answers:
			if a.code == http.StatusServiceUnavailable && timedOut() {
				proctest.FatalOverrun(t, "%s: %s answered 503 after store timeouts", what, a.path)
			}
			return a
		case <-time.After(20 * time.Second):
			proctest.FatalOverrun(t, "%s: no answer within 20 s", what)
			return answer{}
		}
	}

	// Warm both gateways' pools (a first decision that misses the store
	// deadline answers 503), then wait for the warm-up slots to be gone.
	// A 503 for 20 s is a missed deadline only if store calls timed out;
	// otherwise the store failed for another reason (a wrong answer).
	for _, gw := range gws {
		for deadline := time.Now().Add(20 * time.Second); ; {
			code, _, body := slotGet(gw.URL, "/quick")
			if code == http.StatusOK {
				break
			}
			if code != http.StatusServiceUnavailable {
				t.Fatalf("warm-up: %d %s", code, body)
			}
			if time.Now().After(deadline) {
				if timedOut() {
					proctest.FatalOverrun(t, "no decision within the store deadline for 20 s (store timeouts counted)")
				}
				t.Fatalf("warm-up: 503 for 20 s without a store timeout: %s", body)
			}
			time.Sleep(20 * time.Millisecond) // polling an external process
		}
	}
	waitNoSlotKeys(t, cl)

	for i, gw := range gws {
		go get(gw, fmt.Sprintf("/hang/%d", i))
	}
	for range 2 {
		select {
		case <-up.arrived:
		case a := <-answers:
			if a.code == http.StatusServiceUnavailable && timedOut() {
				proctest.FatalOverrun(t, "%s answered 503 after store timeouts", a.path)
			}
			t.Fatalf("a request holding a slot was answered early: %+v", a)
		case <-time.After(20 * time.Second):
			proctest.FatalOverrun(t, "the two held requests did not reach the upstream within 20 s")
		}
	}
	for i := range 10 {
		go get(gws[i%2], fmt.Sprintf("/slow/%d", i))
	}
	for range 4 {
		if a := next("queue full"); a.code != http.StatusTooManyRequests || !strings.Contains(a.body, `"inflight"`) {
			t.Fatalf("with both slots held and the queues full: %+v, want 429 by inflight", a)
		}
	}
	up.once.Do(func() { close(up.release) })
	for range 8 {
		if a := next("admitted"); a.code != http.StatusOK {
			t.Errorf("a held or queued request: %+v, want 200", a)
		}
	}
	if p := up.peak.Load(); p > 2 {
		t.Errorf("the upstream had %d requests of the tenant at once, max is 2", p)
	}
	waited := gws[0].metric("quotagate_queue_wait_seconds_count", "policy=inflight") + gws[1].metric("quotagate_queue_wait_seconds_count", "policy=inflight")
	if waited != 6 {
		t.Errorf("%v requests waited in a queue, want 6", waited)
	}

	// Every slot is released in the Cluster: the tenant's slot set is gone.
	waitNoSlotKeys(t, cl)
}

// waitNoSlotKeys waits until no node of cl holds a slot key (every slot
// released), failing t after 10 s.
func waitNoSlotKeys(t *testing.T, cl *redistest.Cluster) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []any
		for _, n := range cl.Nodes() {
			keys, _ := n.MustDo(t, "KEYS", "*inflight*").([]any)
			left = append(left, keys...)
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			proctest.FatalOverrun(t, "slot keys %v still in the Cluster 10 s after the last response", left)
		}
		time.Sleep(20 * time.Millisecond) // polling external processes
	}
}
