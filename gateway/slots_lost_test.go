package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/telemetry"
)

// redisSlotGateway is a gateway of slotConfig on a real Redis, in front
// of a holding upstream, with its metrics and JSON logs, warmed up.
type redisSlotGateway struct {
	*slotFixture
	srv  *redistest.Server
	tel  *telemetry.Providers
	logs *lockedBuffer
}

func newRedisSlotGateway(t *testing.T) *redisSlotGateway {
	t.Helper()
	srv := redistest.StartStandalone(t)
	tel, m := newTestMetrics(t)
	logs := &lockedBuffer{}
	up := newHoldingUpstream(t)
	f := &fixture{clock: newTestClock()}
	text := "store:\n  kind: redis\n  redis: {addrs: [" + srv.Addr + "], timeout: 1s}\n" + renderConfig(slotConfig, up.srv.URL, "")
	f.path = writeConfig(t, text)
	cfg, err := config.Load(f.path, testGetenv)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := New(cfg, Options{
		Now: f.clock.Now, After: f.clock.After, Getenv: testGetenv, Metrics: m,
		Logger:    slog.New(slog.NewJSONHandler(logs, nil)),
		OpenStore: func(c config.Store) (*stack.Stack, error) { return openRedisStack(c, "", f.clock.Now), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	f.gw = gw
	sf := &slotFixture{fixture: f, up: up}
	warmStore(t, gw.live.Load().store)
	return &redisSlotGateway{slotFixture: sf, srv: srv, tel: tel, logs: logs}
}

// warmStore warms the store's pool (and loads the script) first: a
// decision that misses the 1 s store deadline on a loaded machine would
// let a request through without a slot, which is not what these tests are
// about. A decision the store did not make in time (a timeout, or the
// breaker open after a few of them) is tried again after a pause that
// doubles up to 250 ms, since the breaker's cooldown runs on real time;
// no decision within 10 s is a missed deadline. Any other answer (an
// error, or a failure that says the item is invalid) is a wrong one.
func warmStore(t *testing.T, store *stack.Stack) {
	t.Helper()
	warm := []ratelimit.Item{{Key: "warm", Algorithm: ratelimit.TokenBucket, Limit: ratelimit.Limit{Rate: 1, Per: time.Second, Burst: 1}, OnError: ratelimit.OnErrorOpen}}
	const wait = 10 * time.Second
	deadline := time.Now().Add(wait)
	for pause, tries := 10*time.Millisecond, 1; ; pause, tries = min(2*pause, 250*time.Millisecond), tries+1 {
		d, err := store.Decide(context.Background(), warm)
		switch {
		case err != nil:
			t.Fatalf("warm-up decision: %v; want a decision or a store failure", err)
		case d.Failure == nil:
			return
		case ratelimit.FailureKind(d.Failure) == "invalid":
			t.Fatalf("warm-up decision failed as invalid: %v", d.Failure)
		case time.Now().Add(pause).After(deadline):
			proctest.FatalOverrun(t, "Redis did not decide within its 1 s deadline in %d tries over %v: %v", tries, wait, d.Failure)
		}
		time.Sleep(pause) // polling a real Redis; the breaker's cooldown is real time
	}
}

// TestConcurrencySlotLostOnRedis: a request holds the one slot of its
// policy in Redis; the slot's key goes (deleted, as an eviction would
// leave it). The next renewal takes it back, so the next request still
// finds the policy full, and counts nothing. The key goes again, and
// another holder fills it before the renewal: the renewal counts the slot
// in quotagate_concurrency_slots_lost_total{policy} (0 before) and logs it
// at warn with the policy; the request runs on to its answer, and once the
// other holder is gone another request takes the capacity meanwhile. That
// one's slot then expires unrenewed while the key is full, and is counted
// and freed the same way.
func TestConcurrencySlotLostOnRedis(t *testing.T) {
	rg := newRedisSlotGateway(t)
	sf, f, gw, up, srv, tel, logs := rg.slotFixture, rg.fixture, rg.fixture.gw, rg.up, rg.srv, rg.tel, rg.logs
	lostLine := func(n string) string { return `quotagate_concurrency_slots_lost_total{policy="inflight"} ` + n + "\n" }
	retakenLine := func(n string) string {
		return `quotagate_concurrency_slots_retaken_total{policy="inflight"} ` + n + "\n"
	}
	scrape := func() string {
		rec := httptest.NewRecorder()
		tel.Metrics.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return rec.Body.String()
	}
	if body := scrape(); !strings.Contains(body, lostLine("0")) || !strings.Contains(body, `quotagate_concurrency_slots_lost_total{policy="queued"} 0`+"\n") ||
		!strings.Contains(body, retakenLine("0")) || !strings.Contains(body, `quotagate_concurrency_slots_retaken_total{policy="queued"} 0`+"\n") {
		t.Errorf("fresh /metrics lacks the lost-slot and retaken-slot counters at 0")
	}

	first := sf.start("/held/a")
	if id := up.next(t); id != "a" {
		t.Fatalf("upstream got %q", id)
	}
	if w := f.do(http.MethodGet, "/held/x", map[string]string{"X-Api-Key": freeKey}, nil); w.Code != http.StatusTooManyRequests {
		t.Fatalf("a second request while the slot is held: %d, want 429", w.Code)
	}
	keys, _ := srv.MustDo(t, "KEYS", "*inflight*").([]any)
	if len(keys) != 1 {
		t.Fatalf("slot keys in Redis: %v, want one", keys)
	}
	key := keys[0].(string)
	srv.MustDo(t, "DEL", key)
	if err := gw.slots.keeper.RenewAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if body := scrape(); !strings.Contains(body, lostLine("0")) || !strings.Contains(body, retakenLine("1")) {
		t.Errorf("after the slot was taken back /metrics lacks %q or %q", lostLine("0"), retakenLine("1"))
	}
	if w := f.do(http.MethodGet, "/held/x", map[string]string{"X-Api-Key": freeKey}, nil); w.Code != http.StatusTooManyRequests {
		t.Fatalf("a second request after the slot was taken back: %d, want 429", w.Code)
	}
	// other fills the key (until far in the future, whichever clock the
	// store decides on), a's member gone: a's slot is lost.
	const other = "9000000000000000"
	srv.MustDo(t, "DEL", key)
	srv.MustDo(t, "ZADD", key, other, "other")
	if err := gw.slots.keeper.RenewAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.MustDo(t, "ZREM", key, "other")
	if body := scrape(); !strings.Contains(body, lostLine("1")) {
		t.Errorf("after the renewal /metrics lacks %q", lostLine("1"))
	}
	if l := logs.String(); !strings.Contains(l, `"level":"WARN","msg":"concurrency slots lost`) || !strings.Contains(l, `"policy":"inflight","slots":1`) {
		t.Errorf("no warn line naming the policy:\n%s", l)
	}

	second := sf.start("/held/b")
	if id := up.next(t); id != "b" {
		t.Fatalf("upstream got %q, want b admitted on the freed capacity", id)
	}
	// b's slot expires unrenewed (its score, the time it is free from, is
	// set in the past, as after an outage longer than slot_ttl): the next
	// renewal counts it too, and c gets its capacity.
	holders, _ := srv.MustDo(t, "ZRANGE", key, "0", "-1").([]any)
	if len(holders) != 1 {
		t.Fatalf("holders of the slot key: %v, want b's alone", holders)
	}
	srv.MustDo(t, "ZADD", key, "XX", "1", holders[0].(string))
	srv.MustDo(t, "ZADD", key, other, "other")
	if err := gw.slots.keeper.RenewAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.MustDo(t, "ZREM", key, "other")
	if body := scrape(); !strings.Contains(body, lostLine("2")) {
		t.Errorf("after b's slot expired /metrics lacks %q", lostLine("2"))
	}
	third := sf.start("/held/c")
	if id := up.next(t); id != "c" {
		t.Fatalf("upstream got %q, want c admitted on the expired slot's capacity", id)
	}
	for id, ch := range map[string]<-chan *httptest.ResponseRecorder{"a": first, "b": second, "c": third} {
		up.open(id)
		if w := answer(t, ch); w.Code != http.StatusOK || w.Body.String() != "done "+id {
			t.Errorf("%s: %d %q, want its answer", id, w.Code, w.Body.String())
		}
	}
	// Renewals after that find nothing more to count.
	if err := gw.slots.keeper.RenewAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if body := scrape(); !strings.Contains(body, lostLine("2")) || !strings.Contains(body, retakenLine("1")) {
		t.Errorf("a lost or retaken slot was counted again")
	}
}
