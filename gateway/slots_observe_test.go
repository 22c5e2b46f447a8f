package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestConcurrencyObserved: the in-flight gauge and the queue-wait
// histogram exist at zero before any request, the gauge counts a held slot,
// and the server spans carry how long a request held its slot and how long
// another waited for it, on the gateway's clock.
func TestConcurrencyObserved(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tel, m := newTestMetrics(t)
	f := newSlotFixtureWith(t, Options{Metrics: m, TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))})
	scrape := func() string {
		rec := httptest.NewRecorder()
		tel.Metrics.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return rec.Body.String()
	}
	wantLines := func(when string, lines ...string) {
		t.Helper()
		body := scrape()
		for _, l := range lines {
			if !strings.Contains(body, l+"\n") {
				t.Errorf("%s: /metrics lacks %q", when, l)
			}
		}
	}
	wantLines("fresh", `quotagate_inflight{policy="inflight"} 0`, `quotagate_inflight{policy="queued"} 0`,
		`quotagate_queue_wait_seconds_count{policy="queued"} 0`)

	a := f.start("/queued/a")
	if id := f.up.next(t); id != "a" {
		t.Fatalf("upstream got %q", id)
	}
	wantLines("a slot held", `quotagate_inflight{policy="queued"} 1`)
	b := f.start("/queued/b")
	if !f.gw.slots.queues.await(1, 10*time.Second) {
		t.Fatal("missed deadline: b never waited within 10 s")
	}
	f.clock.Add(300 * time.Millisecond)
	f.up.open("a")
	if w := answer(t, a); w.Code != http.StatusOK {
		t.Fatalf("a: %d", w.Code)
	}
	if id := f.up.next(t); id != "b" {
		t.Fatalf("upstream got %q", id)
	}
	f.up.open("b")
	if w := answer(t, b); w.Code != http.StatusOK {
		t.Fatalf("b: %d", w.Code)
	}
	f.gw.slots.keeper.Wait()
	wantLines("done", `quotagate_inflight{policy="queued"} 0`, `quotagate_queue_wait_seconds_count{policy="queued"} 1`,
		`quotagate_queue_wait_seconds_sum{policy="queued"} 0.3`)

	held, waited := map[int64]bool{}, map[int64]bool{}
	for _, s := range exp.GetSpans() {
		if s.Name != "quotagate.request" {
			continue
		}
		attrs := spanAttrs(s)
		if v, ok := attrs["quotagate.slot_held_ms"]; ok {
			held[v.AsInt64()] = true
		}
		if v, ok := attrs["quotagate.queue_wait_ms"]; ok {
			waited[v.AsInt64()] = true
			if attrs["quotagate.queue_policy"].AsString() != "queued" {
				t.Errorf("queue_policy = %v", attrs["quotagate.queue_policy"])
			}
		}
	}
	// a held its slot 300 ms, b none (the clock stood still); b waited 300 ms.
	if !held[300] || !held[0] || len(held) != 2 || !waited[300] || len(waited) != 1 {
		t.Errorf("slot_held_ms %v, queue_wait_ms %v; want {0, 300} and {300}", held, waited)
	}
}
