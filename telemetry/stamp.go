package telemetry

import (
	"sync/atomic"
	"time"
)

// secondStamp is the RFC 3339 text of one second in one location: what
// every time within that second shares, less the fraction.
type secondStamp struct {
	unix int64
	loc  *time.Location
	date []byte // "2006-01-02T15:04:05"
	zone []byte // "Z" or "+01:30"
}

// lastStamp is the second of the last access line, shared by all lines;
// a line of another second or location replaces it.
var lastStamp atomic.Pointer[secondStamp]

// appendRFC3339Nano appends t as t.AppendFormat(b, time.RFC3339Nano) does,
// formatting the date, clock and zone once per second: lines of the same
// second and location reuse them and only the nanoseconds are written
// (trailing zeros dropped, no point when there are none). A location's
// offset cannot change within a second, as its transitions fall on whole
// seconds. Years outside 0–9999 are left to AppendFormat.
func appendRFC3339Nano(b []byte, t time.Time) []byte {
	sec, loc := t.Unix(), t.Location()
	s := lastStamp.Load()
	if s == nil || s.unix != sec || s.loc != loc {
		if y := t.Year(); y < 0 || y > 9999 {
			return t.AppendFormat(b, time.RFC3339Nano)
		}
		s = &secondStamp{unix: sec, loc: loc,
			date: t.AppendFormat(nil, "2006-01-02T15:04:05"), zone: t.AppendFormat(nil, "Z07:00")}
		lastStamp.Store(s)
	}
	b = append(b, s.date...)
	if ns := t.Nanosecond(); ns != 0 {
		var frac [10]byte
		frac[0] = '.'
		for i := 9; i > 0; i-- {
			frac[i] = byte(ns%10) + '0'
			ns /= 10
		}
		n := 10
		for frac[n-1] == '0' {
			n--
		}
		b = append(b, frac[:n]...)
	}
	return append(b, s.zone...)
}
