package telemetry

import (
	"sync"
	"testing"
	"time"
)

// TestAppendRFC3339NanoMatchesAppendFormat compares the cached stamp with
// time's own RFC3339Nano for times in and across seconds, locations of
// every offset sign, a daylight saving transition, whole seconds, trailing
// zeros and years AppendFormat writes differently.
func TestAppendRFC3339NanoMatchesAppendFormat(t *testing.T) {
	locs := []*time.Location{time.UTC, time.Local, time.FixedZone("plus", 5*3600+1800),
		time.FixedZone("minus", -(3*3600 + 15*60)), time.FixedZone("zero", 0)}
	if ny, err := time.LoadLocation("America/New_York"); err == nil {
		locs = append(locs, ny)
	}
	dst := time.Date(2026, 3, 8, 6, 59, 59, 0, time.UTC) // one second before New York's clocks go forward
	var times []time.Time
	for _, base := range []time.Time{time.Date(2026, 11, 30, 23, 10, 16, 0, time.UTC), dst,
		time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 5, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)} {
		for _, ns := range []int{0, 1, 10, 120000000, 123456789, 999999999, 100000000, 500} {
			times = append(times, base.Add(time.Duration(ns)), base.Add(time.Second+time.Duration(ns)))
		}
	}
	for _, at := range times {
		for _, loc := range locs {
			for range 2 { // the second time from the cache
				lt := at.In(loc)
				if got, want := string(appendRFC3339Nano([]byte("x"), lt)), "x"+lt.Format(time.RFC3339Nano); got != want {
					t.Fatalf("appendRFC3339Nano(%v) = %q, want %q", lt, got, want)
				}
			}
		}
	}
}

// TestAppendRFC3339NanoConcurrent formats times of different seconds and
// locations from several goroutines (run with -race): each must read a
// whole stamp of its own second.
func TestAppendRFC3339NanoConcurrent(t *testing.T) {
	base := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	east := time.FixedZone("east", 9*3600)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				at := base.Add(time.Duration(i%3)*time.Second + time.Duration(g*1000+i))
				if g%2 == 1 {
					at = at.In(east)
				}
				if got, want := string(appendRFC3339Nano(nil, at)), at.Format(time.RFC3339Nano); got != want {
					t.Errorf("appendRFC3339Nano(%v) = %q, want %q", at, got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
}
