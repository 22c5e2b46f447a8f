package memstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

// Expired keys that no batch touches again are swept as new keys arrive,
// so the store's maps stay proportional to the live keys.
func TestMemoryStoreSweepBoundsGrowth(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := New(Options{Now: func() time.Time { return now }, Shards: 4})
	defer s.Close()
	l := ratelimit.Limit{Rate: 1, Per: time.Second}
	const keys = 20000
	for i := range keys {
		// One new key per ms: about 1000 live at any time.
		now = now.Add(time.Millisecond)
		it := ratelimit.Item{Key: fmt.Sprint("k", i), Algorithm: ratelimit.SlidingLog, Limit: l, Cost: 1}
		if _, err := s.Decide(context.Background(), []ratelimit.Item{it}); err != nil {
			t.Fatal(err)
		}
	}
	total := 0
	for i := range s.shards {
		total += len(s.shards[i].keys)
	}
	live := s.Len()
	if live < 900 || live > 1001 {
		t.Fatalf("Len = %d, want about 1000 live keys", live)
	}
	// Before Len swept everything, the maps held at most about twice the
	// live keys plus the per-shard allowance.
	if limit := 2*live + len(s.shards)*memMinSweep + len(s.shards); total > limit {
		t.Fatalf("maps held %d entries for %d live keys (limit %d)", total, live, limit)
	}
}
