package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
)

// TestRedisCalendarKeyExpires: a calendar window's key lives exactly until
// the window ends (to the millisecond), and not on the grid of any Per.
func TestRedisCalendarKeyExpires(t *testing.T) {
	srv := redistest.StartStandalone(t)
	berlin, err := ratelimit.LoadZone("Europe/Berlin")
	if err != nil {
		t.Skipf("no time zone database: %v", err)
	}
	// Four hours before the end of October, Berlin time.
	now := time.Date(2026, 10, 31, 20, 0, 0, 0, berlin.Location())
	s := newRedisStore(t, []string{srv.Addr}, func() time.Time { return now }, 0)
	it := ratelimit.Item{Key: "{cal}:month", Algorithm: ratelimit.FixedWindow, Cost: 1,
		Limit: ratelimit.Limit{Rate: 1_000_000, Calendar: ratelimit.Calendar{Unit: ratelimit.Month, Zone: berlin}}}
	d, err := s.Decide(context.Background(), []ratelimit.Item{it})
	if err != nil || !d.Allowed {
		t.Fatalf("Decide: %+v, %v", d, err)
	}
	if d.Results[0].ResetAfter != 4*time.Hour || d.Results[0].Remaining != 999_999 {
		t.Fatalf("result %+v, want 999999 left, reset after 4h", d.Results[0])
	}
	pttl, _ := srv.MustDo(t, "PTTL", it.Key).(int64)
	if want := (4 * time.Hour).Milliseconds(); pttl <= want-5000 || pttl > want {
		t.Fatalf("PTTL %d ms, want just under %d", pttl, want)
	}
}
