package rls

import (
	"strings"
	"time"
)

// Unit is the period of a rate limit, as in RLS v3 and envoyproxy/ratelimit.
// The zero value is invalid.
type Unit uint8

// The units of a rate_limit. Week, month and year are fixed lengths (7, 30
// and 365 days) aligned to the Unix epoch, as envoyproxy/ratelimit counts
// them; they are not calendar weeks, months or years.
const (
	Second Unit = iota + 1
	Minute
	Hour
	Day
	Week
	Month
	Year
)

var unitNames = [...]string{Second: "second", Minute: "minute", Hour: "hour", Day: "day", Week: "week", Month: "month", Year: "year"}

var unitLengths = [...]time.Duration{
	Second: time.Second, Minute: time.Minute, Hour: time.Hour, Day: 24 * time.Hour,
	Week: 7 * 24 * time.Hour, Month: 30 * 24 * time.Hour, Year: 365 * 24 * time.Hour,
}

// String returns the unit's name in configuration, such as "minute".
func (u Unit) String() string {
	if u == 0 || int(u) >= len(unitNames) {
		return "unknown"
	}
	return unitNames[u]
}

// Duration returns the unit's length; 0 for an invalid unit.
func (u Unit) Duration() time.Duration {
	if int(u) >= len(unitLengths) {
		return 0
	}
	return unitLengths[u]
}

// ParseUnit maps a unit's name, in any case ("MINUTE" as the RLS enum
// spells it), to a Unit.
func ParseUnit(name string) (Unit, bool) {
	n := strings.ToLower(name)
	for u, s := range unitNames {
		if s != "" && s == n {
			return Unit(u), true
		}
	}
	return 0, false
}
