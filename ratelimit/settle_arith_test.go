package ratelimit_test

import (
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

// TestSettleArithmetic pins what Settle does to one state per algorithm.
func TestSettleArithmetic(t *testing.T) {
	now := time.Unix(1_700_000_000, 0).UnixMicro()
	tb := ratelimit.Limit{Rate: 10, Per: time.Second, Burst: 10}
	// A charge below the floor of exactness stops there.
	st, _, _ := ratelimit.Settle(ratelimit.TokenBucket, nil, now, 0, ratelimit.MaxSettleDelta(ratelimit.TokenBucket, tb), tb)
	st, ttl, _ := ratelimit.Settle(ratelimit.TokenBucket, &st, now, 0, ratelimit.MaxSettleDelta(ratelimit.TokenBucket, tb), tb)
	if want := 10*1_000_000 - int64(1)<<53; st.Level != want {
		t.Errorf("deepest debt: level %d, want %d", st.Level, want)
	}
	if ttl <= 0 {
		t.Errorf("a bucket in debt must be kept: ttl %v", ttl)
	}
	st, _, _ = ratelimit.Settle(ratelimit.TokenBucket, &st, now, 0, -ratelimit.MaxSettleDelta(ratelimit.TokenBucket, tb), tb)
	if st.Per == 0 || st.Level >= 10*1_000_000 {
		t.Errorf("one refund of the deepest debt: %+v, want still short of full", st)
	}
	st, ttl, _ = ratelimit.Settle(ratelimit.TokenBucket, &st, now, 0, -ratelimit.MaxSettleDelta(ratelimit.TokenBucket, tb), tb)
	if st.Per != 0 || ttl != 0 {
		t.Errorf("refund to full: %+v, ttl %v; want an absent key", st, ttl)
	}
	// An invalid settlement leaves the state as it is.
	in := ratelimit.State{Per: 1_000_000, Level: 5}
	if got, ttl, changed := ratelimit.Settle(ratelimit.TokenBucket, &in, now, 0, 1<<62, tb); got.Level != 5 || ttl != 0 || changed {
		t.Errorf("invalid delta: %+v, %v", got, ttl)
	}
	// A sliding log refund takes off the newest entries first.
	sl := ratelimit.Limit{Rate: 10, Per: time.Second}
	log := ratelimit.State{Per: 1_000_000, Entries: []ratelimit.LogEntry{{At: now - 2, Cost: 3}, {At: now - 1, Cost: 2}}}
	got, _, _ := ratelimit.Settle(ratelimit.SlidingLog, &log, now, 0, -3, sl)
	if len(got.Entries) != 1 || got.Entries[0] != (ratelimit.LogEntry{At: now - 2, Cost: 2}) {
		t.Errorf("sliding log refund of 3: %+v", got.Entries)
	}
	if len(log.Entries) != 2 || log.Entries[1].Cost != 2 {
		t.Errorf("Settle modified its input: %+v", log.Entries)
	}
	// With the reservation's time, only its entries give units back.
	got, _, changed := ratelimit.Settle(ratelimit.SlidingLog, &log, now, now-2, -4, sl)
	if !changed || len(got.Entries) != 1 || got.Entries[0] != (ratelimit.LogEntry{At: now - 1, Cost: 2}) {
		t.Errorf("sliding log refund of 4 reserved at now-2: %+v (changed %v), want only the entry at now-1 left", got.Entries, changed)
	}
	if got, _, changed := ratelimit.Settle(ratelimit.SlidingLog, &log, now, now-5, -1, sl); changed || len(got.Entries) != 2 {
		t.Errorf("refund of a reservation with no entry left: %+v (changed %v), want nothing changed", got.Entries, changed)
	}
	// A reservation time after now (the clock went back) is now.
	if got, _, changed := ratelimit.Settle(ratelimit.SlidingLog, &log, now-1, now+7, -1, sl); !changed || got.Entries[1].Cost != 1 {
		t.Errorf("refund reserved after now: %+v (changed %v), want 1 off the entry at now-1", got.Entries, changed)
	}
}
