package storetest

import (
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

// berlin is the zone of the calendar cases: it leaves daylight saving time
// on the last Sunday of October (2026-10-25, 03:00 CEST -> 02:00 CET) and
// enters it on the last Sunday of March (2026-03-29, 02:00 CET -> 03:00 CEST).
func berlin(t *testing.T) ratelimit.Zone {
	t.Helper()
	z, err := ratelimit.LoadZone("Europe/Berlin")
	if err != nil {
		t.Skipf("no time zone database: %v", err)
	}
	return z
}

// calendarCase is a calendar window that contains a change of daylight
// saving time: at "from" the limit is used up; the next request must wait
// exactly until "end".
type calendarCase struct {
	name      string
	unit      ratelimit.CalendarUnit
	from, end string // local times in Europe/Berlin, "2006-01-02 15:04"
	length    time.Duration
}

var calendarCases = []calendarCase{
	{"month_october_25h_longer", ratelimit.Month, "2026-10-27 09:00", "2026-11-01 00:00", 31*24*time.Hour + time.Hour},
	{"month_march_1h_shorter", ratelimit.Month, "2026-03-30 09:00", "2026-04-01 00:00", 31*24*time.Hour - time.Hour},
	{"day_of_autumn_change_25h", ratelimit.Day, "2026-10-25 01:30", "2026-10-26 00:00", 25 * time.Hour},
	{"day_of_spring_change_23h", ratelimit.Day, "2026-03-29 01:30", "2026-03-30 00:00", 23 * time.Hour},
	{"week_starts_monday", ratelimit.Week, "2026-10-25 23:00", "2026-10-26 00:00", 7*24*time.Hour + time.Hour},
}

// testCalendar checks calendar windows on the store's clock: a window that
// spans a DST change resets at local midnight, no earlier and no later, and
// reports the exact time to that reset.
func testCalendar(t *testing.T, newStore NewStore) {
	z := berlin(t)
	for _, c := range calendarCases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, newStore)
			from, err := time.ParseInLocation("2006-01-02 15:04", c.from, z.Location())
			if err != nil {
				t.Fatal(err)
			}
			end, err := time.ParseInLocation("2006-01-02 15:04", c.end, z.Location())
			if err != nil {
				t.Fatal(err)
			}
			lim := ratelimit.Limit{Rate: 3, Calendar: ratelimit.Calendar{Unit: c.unit, Zone: z}}
			if start, stop := lim.Calendar.Bounds(from.UnixMicro()); time.Duration(stop-start)*time.Microsecond != c.length {
				t.Fatalf("window length %v, want %v", time.Duration(stop-start)*time.Microsecond, c.length)
			}
			it := ratelimit.Item{Key: e.key("cal"), Algorithm: ratelimit.FixedWindow, Limit: lim, Cost: 3}
			e.clock.Set(from)
			r := e.one(it)
			if !r.Allowed || r.Remaining != 0 || r.ResetAfter != end.Sub(from) {
				t.Fatalf("at %v: %+v, want allowed with 0 left, reset after %v", from, r, end.Sub(from))
			}
			it.Cost = 1
			last := end.Add(-time.Microsecond)
			e.clock.Set(last)
			if r := e.one(it); r.Allowed || r.RetryAfter != time.Microsecond {
				t.Fatalf("1µs before the reset: %+v, want a denial with retry 1µs", r)
			}
			e.clock.Set(end)
			if r := e.one(it); !r.Allowed || r.Remaining != 2 {
				t.Fatalf("at the reset %v: %+v, want allowed with 2 left", end, r)
			}
			// The next window's own length is reported.
			_, next := lim.Calendar.Bounds(end.UnixMicro())
			if r := e.one(ratelimit.Item{Key: e.key("cal"), Algorithm: ratelimit.FixedWindow, Limit: lim, Cost: 0}); r.ResetAfter != time.Duration(next-end.UnixMicro())*time.Microsecond {
				t.Fatalf("reset after %v in the next window, want %v", r.ResetAfter, time.Duration(next-end.UnixMicro())*time.Microsecond)
			}
		})
	}
}
