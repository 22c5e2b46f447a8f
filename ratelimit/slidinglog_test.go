package ratelimit

import (
	"reflect"
	"testing"
	"time"
)

var log3 = Limit{Rate: 3, Per: time.Second}

// Apply never writes into the entries of the state it is given, even when
// two calls extend the same state.
func TestSlidingLogDoesNotAlias(t *testing.T) {
	entries := make([]LogEntry, 1, 8)
	entries[0] = LogEntry{At: baseUS, Cost: 1}
	st := State{Per: 1_000_000, Entries: entries}
	a, _, _ := Apply(SlidingLog, &st, baseUS+10, 1, log3, true)
	b, _, _ := Apply(SlidingLog, &st, baseUS+20, 2, log3, true)
	if len(st.Entries) != 1 || entries[:2][1] != (LogEntry{}) {
		t.Fatalf("the given state was modified: %+v", entries[:2])
	}
	if a.Entries[1] != (LogEntry{At: baseUS + 10, Cost: 1}) || b.Entries[1] != (LogEntry{At: baseUS + 20, Cost: 2}) {
		t.Fatalf("the two results share storage: %+v %+v", a.Entries, b.Entries)
	}
}

func TestSlidingLogClockBackAndTTL(t *testing.T) {
	st := State{Per: 1_000_000, Entries: []LogEntry{{At: baseUS, Cost: 1}, {At: baseUS + 500_000, Cost: 1}}}
	// 200 ms in the past the newest entry is the present: it is added
	// there and the key lives until 1 s after it.
	next, r, ttl := Apply(SlidingLog, &st, baseUS+300_000, 1, log3, true)
	want := []LogEntry{{At: baseUS, Cost: 1}, {At: baseUS + 500_000, Cost: 1}, {At: baseUS + 500_000, Cost: 1}}
	if !reflect.DeepEqual(next.Entries, want) {
		t.Fatalf("entries %+v, want %+v", next.Entries, want)
	}
	if r.ResetAfter != time.Second || ttl != 1200*time.Millisecond {
		t.Fatalf("reset %v ttl %v; want 1s (from the newest entry) and 1.2s (from now)", r.ResetAfter, ttl)
	}
	// A change of Per keeps the log: its times are absolute.
	_, r, _ = Apply(SlidingLog, &next, baseUS+600_000, 0, Limit{Rate: 3, Per: 2 * time.Second}, false)
	if r.Remaining != 0 {
		t.Fatalf("after a Per change: remaining %d, want 0", r.Remaining)
	}
}

func TestSlidingLogRefund(t *testing.T) {
	st := State{Per: 1_000_000, Entries: []LogEntry{{At: 1, Cost: 2}, {At: 2, Cost: 1}, {At: 3, Cost: 2}, {At: 4, Cost: 1}}}
	got := Refund(SlidingLog, &st, 5, 2, log3)
	if want := []LogEntry{{At: 1, Cost: 2}, {At: 2, Cost: 1}, {At: 4, Cost: 1}}; !reflect.DeepEqual(got.Entries, want) {
		t.Fatalf("refund 2: %+v, want %+v", got.Entries, want)
	}
	if len(st.Entries) != 4 || st.Entries[2].At != 3 {
		t.Fatalf("refund modified its input: %+v", st.Entries)
	}
	if got := Refund(SlidingLog, &st, 5, 3, log3); !reflect.DeepEqual(got.Entries, st.Entries) {
		t.Fatalf("refund of a cost with no entry: %+v", got.Entries)
	}
	one := State{Per: 1_000_000, Entries: []LogEntry{{At: 1, Cost: 1}}}
	if got := Refund(SlidingLog, &one, 5, 1, log3); got.Entries != nil {
		t.Fatalf("refund of the last entry: %+v, want no entries", got.Entries)
	}
}
