package ratelimit

import (
	"fmt"
	"slices"
	"time"
)

// CalendarUnit is the length of a calendar window. The zero value means no
// calendar: windows are aligned to multiples of Limit.Per.
type CalendarUnit uint8

// The calendar units.
const (
	// Day windows start at local midnight. Across a change to or from
	// daylight saving time a day lasts 23 or 25 hours.
	Day CalendarUnit = iota + 1
	// Week windows start at local midnight on Monday (ISO 8601 weeks).
	Week
	// Month windows start at local midnight on the first of the month.
	Month
)

var calendarUnitNames = [...]string{Day: "day", Week: "week", Month: "month"}

// Valid reports whether u is one of the defined units.
func (u CalendarUnit) Valid() bool { return u != 0 && int(u) < len(calendarUnitNames) }

// String returns the configuration name of u, such as "month".
func (u CalendarUnit) String() string {
	if !u.Valid() {
		return fmt.Sprintf("CalendarUnit(%d)", uint8(u))
	}
	return calendarUnitNames[u]
}

// MarshalText returns the configuration name of u; an invalid u is an error.
func (u CalendarUnit) MarshalText() ([]byte, error) {
	if !u.Valid() {
		return nil, fmt.Errorf("ratelimit: invalid %s", u)
	}
	return []byte(u.String()), nil
}

// UnmarshalText sets u from "day", "week" or "month".
func (u *CalendarUnit) UnmarshalText(b []byte) error {
	if i := slices.Index(calendarUnitNames[1:], string(b)); i >= 0 {
		*u = CalendarUnit(i + 1)
		return nil
	}
	return fmt.Errorf("must be day, week or month, got %q", b)
}

// Zone is a time zone of the IANA database. The zero value is UTC.
type Zone struct{ loc *time.Location }

// LoadZone returns the zone named name ("Europe/Berlin", "UTC"), or an
// error naming it when the time zone database does not know it.
func LoadZone(name string) (Zone, error) {
	if name == "" {
		return Zone{}, fmt.Errorf("must name a time zone such as Europe/Berlin or UTC")
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return Zone{}, fmt.Errorf("unknown time zone %q", name)
	}
	return Zone{loc: loc}, nil
}

// Location returns the zone as a *time.Location (time.UTC for the zero Zone).
func (z Zone) Location() *time.Location {
	if z.loc == nil {
		return time.UTC
	}
	return z.loc
}

// String returns the zone's name.
func (z Zone) String() string { return z.Location().String() }

// MarshalText returns the zone's name.
func (z Zone) MarshalText() ([]byte, error) { return []byte(z.String()), nil }

// UnmarshalText sets z from a zone name (see LoadZone).
func (z *Zone) UnmarshalText(b []byte) error {
	v, err := LoadZone(string(b))
	if err != nil {
		return err
	}
	*z = v
	return nil
}

// Calendar aligns the windows of a FixedWindow limit to the local calendar
// of a time zone instead of to multiples of Limit.Per. Its zero value (Unit
// 0) means no calendar.
//
// A calendar window runs from local midnight at its start (of the day, of
// Monday, of the first of the month) to local midnight at the start of the
// next one, so its length follows daylight saving time: the day of the
// spring change lasts 23 hours, and so on. Where local midnight does not
// exist (a zone that changes its clocks at midnight) the window starts at
// the first instant after it, as time.Date normalizes it.
type Calendar struct {
	Unit CalendarUnit `mapstructure:"unit"`
	Zone Zone         `mapstructure:"time_zone"`
}

// Set reports whether c aligns windows to the calendar.
func (c Calendar) Set() bool { return c.Unit != 0 }

// String returns "month in Europe/Berlin", or "" when c is not set.
func (c Calendar) String() string {
	if !c.Set() {
		return ""
	}
	return c.Unit.String() + " in " + c.Zone.String()
}

// Bounds returns the window of c that holds the Unix time nowUS
// (microseconds): its start and its end, both Unix microseconds, start <=
// nowUS < end. c must be set and valid.
func (c Calendar) Bounds(nowUS int64) (start, end int64) {
	t := time.UnixMicro(nowUS).In(c.Zone.Location())
	y, m, d := t.Date()
	var s, e time.Time
	loc := t.Location()
	switch c.Unit {
	case Day:
		s = time.Date(y, m, d, 0, 0, 0, 0, loc)
		e = time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	case Week:
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		s = time.Date(y, m, d-back, 0, 0, 0, 0, loc)
		e = time.Date(y, m, d-back+7, 0, 0, 0, 0, loc)
	default:
		s = time.Date(y, m, 1, 0, 0, 0, 0, loc)
		e = time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
	}
	start, end = s.UnixMicro(), e.UnixMicro()
	// time.Date may normalize a missing midnight past nowUS in zones that
	// skip midnight; keep the invariant start <= nowUS < end.
	start = min(start, nowUS)
	end = max(end, nowUS+1)
	return start, end
}

// MaxLength is the longest a window of c can last: 25 hours for a day,
// 7 days and an hour for a week, 31 days and an hour for a month.
func (c Calendar) MaxLength() time.Duration {
	switch c.Unit {
	case Day:
		return 25 * time.Hour
	case Week:
		return 7*24*time.Hour + time.Hour
	}
	return 31*24*time.Hour + time.Hour
}

// Until returns how long from now until the current window of c ends, at
// least one microsecond. c must be set.
func (c Calendar) Until(now time.Time) time.Duration {
	us := now.UnixMicro()
	_, end := c.Bounds(us)
	return micros(end - us)
}

// validateCalendar is Limit.Validate for a limit whose Calendar is set:
// only FixedWindow, Per 0 (the calendar replaces it), Burst 0, a defined
// unit, and 0 < Rate <= 2^53.
func (l Limit) validateCalendar(alg Algorithm) error {
	var errs LimitErrors
	add := func(field, format string, args ...any) {
		errs = append(errs, &LimitError{Field: field, Problem: fmt.Sprintf(format, args...)})
	}
	if alg != FixedWindow {
		add("calendar", "applies to fixed_window only, not %s; use per", alg)
	}
	if !l.Calendar.Unit.Valid() {
		add("calendar.unit", "must be day, week or month")
	}
	if l.Per != 0 {
		add("per", "must be left out when calendar is set (the calendar sets the window)")
	}
	if l.Burst != 0 && alg == FixedWindow {
		add("burst", "does not apply to %s (its capacity is rate per window); remove it", alg)
	}
	if l.Buckets != 0 {
		add("buckets", "applies to sliding_window only; remove it")
	}
	if l.Max != 0 {
		add("max", "applies to concurrency only; remove it")
	}
	if l.Rate <= 0 {
		add("rate", "must be > 0")
	} else if l.Rate > maxExact {
		add("rate", "must be at most 2^53")
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}
