package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestConcurrencySlotStoreErrorsObserved: a slot release that Redis
// refuses (an ACL change took ZREM away from the gateway's user) keeps
// the slot held until its slot_ttl, so the policy refuses requests the
// operator cannot explain; a refused renewal may lose slots. Both are
// counted in quotagate_store_errors_total and logged at warn (a few a
// period), not only at debug.
func TestConcurrencySlotStoreErrorsObserved(t *testing.T) {
	rg := newRedisSlotGateway(t)
	sf, f, gw, up, srv, tel, logs := rg.slotFixture, rg.fixture, rg.fixture.gw, rg.up, rg.srv, rg.tel, rg.logs
	errorsNow := func() int64 {
		rec := httptest.NewRecorder()
		tel.Metrics.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		mm := regexp.MustCompile(`(?m)^quotagate_store_errors_total\{kind="unavailable"\} (\d+)$`).FindStringSubmatch(rec.Body.String())
		if mm == nil {
			return 0
		}
		n, _ := strconv.ParseInt(mm[1], 10, 64)
		return n
	}

	first := sf.start("/held/a")
	if id := up.next(t); id != "a" {
		t.Fatalf("upstream got %q", id)
	}
	srv.MustDo(t, "ACL", "SETUSER", "default", "-zrem")
	before := errorsNow()

	// The renewal is refused too once ZADD is: a round that fails.
	srv.MustDo(t, "ACL", "SETUSER", "default", "-zadd")
	if err := gw.slots.keeper.RenewAll(context.Background()); err == nil {
		t.Fatal("renewal succeeded without ZADD")
	}
	srv.MustDo(t, "ACL", "SETUSER", "default", "+zadd")
	if got := errorsNow(); got != before+1 {
		t.Errorf("store errors after a refused renewal: %d, want %d", got, before+1)
	}

	up.open("a")
	if w := answer(t, first); w.Code != http.StatusOK {
		t.Fatalf("a: %d %q", w.Code, w.Body.String())
	}
	gw.slots.keeper.Wait()
	if got := errorsNow(); got != before+2 {
		t.Errorf("store errors after a refused release: %d, want %d", got, before+2)
	}
	l := logs.String()
	for _, op := range []string{"renew", "release"} {
		if !strings.Contains(l, `"level":"WARN","msg":"concurrency slot `+op+` failed"`) {
			t.Errorf("no warn line for the refused %s:\n%s", op, l)
		}
	}
	// What the operator is told about: the slot is still held.
	if w := f.do(http.MethodGet, "/held/x", map[string]string{"X-Api-Key": freeKey}, nil); w.Code != http.StatusTooManyRequests {
		t.Errorf("after the refused release: %d, want 429 (the slot is held until its slot_ttl)", w.Code)
	}
}
