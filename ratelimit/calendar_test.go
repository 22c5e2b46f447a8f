package ratelimit_test

import (
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

func mustZone(t *testing.T, name string) ratelimit.Zone {
	t.Helper()
	z, err := ratelimit.LoadZone(name)
	if err != nil {
		t.Skipf("no time zone database: %v", err)
	}
	return z
}

func TestCalendarBounds(t *testing.T) {
	berlin := mustZone(t, "Europe/Berlin")
	loc := berlin.Location()
	local := func(y int, m time.Month, d, h int) time.Time { return time.Date(y, m, d, h, 0, 0, 0, loc) }
	cases := []struct {
		unit       ratelimit.CalendarUnit
		zone       ratelimit.Zone
		at         time.Time
		start, end time.Time
	}{
		{ratelimit.Month, berlin, local(2026, 10, 25, 2), local(2026, 10, 1, 0), local(2026, 11, 1, 0)},
		{ratelimit.Month, berlin, local(2026, 12, 31, 23), local(2026, 12, 1, 0), local(2027, 1, 1, 0)},
		{ratelimit.Day, berlin, local(2026, 3, 29, 12), local(2026, 3, 29, 0), local(2026, 3, 30, 0)},
		{ratelimit.Week, berlin, local(2026, 11, 1, 12), local(2026, 10, 26, 0), local(2026, 11, 2, 0)}, // a Sunday
		{ratelimit.Week, berlin, local(2026, 10, 26, 0), local(2026, 10, 26, 0), local(2026, 11, 2, 0)}, // Monday midnight starts a week
		{ratelimit.Day, ratelimit.Zone{}, time.Date(2026, 5, 5, 23, 59, 0, 0, time.UTC), time.Date(2026, 5, 5, 0, 0, 0, 0, time.UTC), time.Date(2026, 5, 6, 0, 0, 0, 0, time.UTC)},
	}
	for _, c := range cases {
		s, e := ratelimit.Calendar{Unit: c.unit, Zone: c.zone}.Bounds(c.at.UnixMicro())
		if s != c.start.UnixMicro() || e != c.end.UnixMicro() {
			t.Errorf("%s in %s at %v: [%v, %v), want [%v, %v)", c.unit, c.zone, c.at,
				time.UnixMicro(s).In(loc), time.UnixMicro(e).In(loc), c.start, c.end)
		}
	}
}

// BenchmarkApplyCalendar is what aligning a fixed window to the calendar of
// a time zone adds to one decision: finding the window's bounds.
func BenchmarkApplyCalendar(b *testing.B) {
	z, err := ratelimit.LoadZone("Europe/Berlin")
	if err != nil {
		b.Skip(err)
	}
	now := time.Date(2026, 10, 25, 12, 0, 0, 0, z.Location()).UnixMicro()
	for _, c := range []struct {
		name string
		lim  ratelimit.Limit
	}{
		{"per_24h", ratelimit.Limit{Rate: 100_000, Per: 24 * time.Hour}},
		{"calendar_day", ratelimit.Limit{Rate: 100_000, Calendar: ratelimit.Calendar{Unit: ratelimit.Day, Zone: z}}},
		{"calendar_month", ratelimit.Limit{Rate: 100_000, Calendar: ratelimit.Calendar{Unit: ratelimit.Month, Zone: z}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var st ratelimit.State
			for i := 0; i < b.N; i++ {
				st, _, _ = ratelimit.Apply(ratelimit.FixedWindow, &st, now+int64(i), 1, c.lim, true)
			}
		})
	}
}
