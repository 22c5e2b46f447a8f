package gateway

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// calendarConfig limits each tenant to 3 requests per Berlin day.
const calendarConfig = `
server:
  listen: 127.0.0.1:0
  admin_listen: 127.0.0.1:0
identity:
  api_keys:
    - {key_sha256: FREEHASH, tenant: acme, tier: free}
tiers:
  free: {}
policies:
  daily:
    algorithm: fixed_window
    limits:
      "*": {rate: 3, calendar: {unit: day, time_zone: Europe/Berlin}}
upstreams:
  payments: {url: UPSTREAM}
  dead: {url: DEADURL}
routes:
  - {name: transfers.get, method: GET, path: "/v1/transfers/{id}", upstream: payments, policies: [daily]}
`

// TestCalendarDayHeaders: on the 25-hour day that ends daylight saving time
// in Berlin, RateLimit-Policy's w and Retry-After count to local midnight,
// and the quota comes back exactly then.
func TestCalendarDayHeaders(t *testing.T) {
	f := newFixture(t, calendarConfig)
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skipf("no time zone database: %v", err)
	}
	// 2026-10-25 01:00 CEST; midnight is 24 h (of real time) away.
	start := time.Date(2026, 10, 25, 1, 0, 0, 0, berlin)
	f.clock.Set(start)
	midnight := time.Date(2026, 10, 26, 0, 0, 0, 0, berlin)
	if d := midnight.Sub(start); d != 24*time.Hour {
		t.Fatalf("test premise: %v to midnight", d)
	}
	for i := 0; i < 3; i++ {
		w := f.do("GET", "/v1/transfers/1", bearer(freeKey), nil)
		if w.Code != http.StatusOK {
			t.Fatalf("request %d: %d", i, w.Code)
		}
		if got, want := w.Header().Get("RateLimit-Policy"), `"daily";q=3;w=86400`; got != want {
			t.Fatalf("RateLimit-Policy = %q, want %q", got, want)
		}
	}
	f.clock.Add(23*time.Hour + 30*time.Minute)
	w := f.do("GET", "/v1/transfers/1", bearer(freeKey), nil)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("fourth request: %d, want 429", w.Code)
	}
	if got, want := w.Header().Get("RateLimit-Policy"), `"daily";q=3;w=1800`; got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
	ra, err := strconv.Atoi(w.Header().Get("Retry-After"))
	if err != nil || ra < 1800 || ra > 1800+60 {
		t.Errorf("Retry-After = %q, want 1800 s plus jitter", w.Header().Get("Retry-After"))
	}
	if !strings.Contains(w.Body.String(), `"retry_after_ms":1800000`) {
		t.Errorf("429 body lacks the exact wait: %s", w.Body.String())
	}
	f.clock.Add(30*time.Minute - time.Microsecond)
	if w := f.do("GET", "/v1/transfers/1", bearer(freeKey), nil); w.Code != http.StatusTooManyRequests {
		t.Fatalf("1µs before midnight: %d, want 429", w.Code)
	}
	f.clock.Add(time.Microsecond)
	if w := f.do("GET", "/v1/transfers/1", bearer(freeKey), nil); w.Code != http.StatusOK {
		t.Fatalf("at midnight: %d, want 200", w.Code)
	}
}
