package gateway

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
)

// TestConcurrencySlotFreedOnceWhenClientLeaves: on a real Redis, over real
// HTTP, a caller that leaves mid-stream (the proxy then aborts the
// response with a panic) or before the response (499) gives its slot back,
// exactly once: the slot key holds no member afterwards, and after both
// the next request is admitted while one more is refused (a slot freed
// twice would admit it).
func TestConcurrencySlotFreedOnceWhenClientLeaves(t *testing.T) {
	rg := newRedisSlotGateway(t)
	f, gw, up, srv := rg.fixture, rg.fixture.gw, rg.up, rg.srv
	front := httptest.NewServer(gw)
	t.Cleanup(front.Close)
	refused := func(when string) {
		t.Helper()
		if w := f.do(http.MethodGet, "/held/x", map[string]string{"X-Api-Key": freeKey}, nil); w.Code != http.StatusTooManyRequests {
			t.Fatalf("%s: another request got %d, want 429", when, w.Code)
		}
	}
	for _, id := range []string{"stream-a", "b"} {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, front.URL+"/held/"+id, nil)
		req.Header.Set("X-Api-Key", freeKey)
		type result struct {
			resp *http.Response
			err  error
		}
		done := make(chan result, 1)
		go func() {
			resp, err := http.DefaultClient.Do(req)
			done <- result{resp, err}
		}()
		if got := up.next(t); got != id {
			t.Fatalf("upstream got %q, want %q", got, id)
		}
		refused(id + " held")
		if id == "stream-a" { // the caller reads the start of the response, then leaves
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			if line, err := bufio.NewReader(r.resp.Body).ReadString('\n'); err != nil || line != "start\n" {
				t.Fatalf("first line %q, %v", line, err)
			}
			cancel()
			r.resp.Body.Close()
		} else { // the caller leaves before the response
			cancel()
			if r := <-done; r.err == nil {
				r.resp.Body.Close()
				t.Fatalf("%s: status %d, want the request cancelled", id, r.resp.StatusCode)
			}
		}
		for deadline := time.Now().Add(10 * time.Second); gw.slots.inflightOf("inflight") != 0; {
			if time.Now().After(deadline) {
				proctest.FatalOverrun(t, "%s: the request still held its slot 10 s after its caller left", id)
			}
			time.Sleep(5 * time.Millisecond) // the handler ends when net/http notices the caller gone
		}
		gw.slots.keeper.Wait()
		keys, _ := srv.MustDo(t, "KEYS", "*inflight*").([]any)
		for _, k := range keys {
			if n, _ := srv.MustDo(t, "ZCARD", k.(string)).(int64); n != 0 {
				t.Errorf("after %s's caller left, slot key %s holds %d members, want 0", id, k, n)
			}
		}
	}
	next := rg.start("/held/c")
	if got := up.next(t); got != "c" {
		t.Fatalf("upstream got %q, want c admitted", got)
	}
	refused("c held")
	up.open("c")
	if w := answer(t, next); w.Code != http.StatusOK || w.Body.String() != "done c" {
		t.Fatalf("c: %d %q", w.Code, w.Body.String())
	}
}
