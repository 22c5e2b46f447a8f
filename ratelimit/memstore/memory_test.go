package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/memstore"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

func newMemory(t *testing.T, now func() time.Time) ratelimit.Store {
	s := memstore.New(memstore.Options{Now: now})
	t.Cleanup(func() { s.Close() })
	return s
}

func TestMemoryStoreConformance(t *testing.T) {
	storetest.Run(t, newMemory)
}

func TestMemoryStoreConformanceOneShard(t *testing.T) {
	// One shard: every batch locks the same mutex.
	storetest.Run(t, func(t *testing.T, now func() time.Time) ratelimit.Store {
		s := memstore.New(memstore.Options{Now: now, Shards: 1})
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestMemoryStoreConformanceShared(t *testing.T) {
	// One store for every subtest, as a persistent store would be.
	var clock struct {
		sync.Mutex
		now func() time.Time
	}
	shared := memstore.New(memstore.Options{Now: func() time.Time {
		clock.Lock()
		defer clock.Unlock()
		return clock.now()
	}})
	t.Cleanup(func() { shared.Close() })
	storetest.Run(t, func(t *testing.T, now func() time.Time) ratelimit.Store {
		clock.Lock()
		clock.now = now
		clock.Unlock()
		return shared
	})
}

func TestMemoryStoreExpiry(t *testing.T) {
	storetest.RunExpiry(t, newMemory)
}

var t0 = time.Unix(1_700_000_000, 0)

func TestMemoryStoreLenCountsLiveKeys(t *testing.T) {
	clock := storetest.NewClock(t0)
	s := memstore.New(memstore.Options{Now: clock.Now, Shards: 4})
	defer s.Close()
	ctx := context.Background()
	decide := func(key string, alg ratelimit.Algorithm, l ratelimit.Limit, cost int64) {
		t.Helper()
		if _, err := s.Decide(ctx, []ratelimit.Item{{Key: key, Algorithm: alg, Limit: l, Cost: cost}}); err != nil {
			t.Fatal(err)
		}
	}
	short := ratelimit.Limit{Rate: 1, Per: time.Second}
	long := ratelimit.Limit{Rate: 1, Per: time.Hour}
	decide("peek", ratelimit.FixedWindow, short, 0)
	if n := s.Len(); n != 0 {
		t.Fatalf("after a peek Len = %d, want 0 (a peek stores nothing)", n)
	}
	for i := range 10 {
		decide(fmt.Sprint("short", i), ratelimit.FixedWindow, short, 1)
	}
	decide("long", ratelimit.SlidingLog, long, 1)
	if n := s.Len(); n != 11 {
		t.Fatalf("Len = %d, want 11", n)
	}
	clock.Add(time.Second) // the fixed windows end
	if n := s.Len(); n != 1 {
		t.Fatalf("after the windows ended Len = %d, want 1", n)
	}
	clock.Add(time.Hour)
	if n := s.Len(); n != 0 {
		t.Fatalf("after the log emptied Len = %d, want 0", n)
	}
}

func TestMemoryStoreEmptyBatch(t *testing.T) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	d, err := s.Decide(context.Background(), nil)
	if err != nil || !d.Allowed || len(d.Results) != 0 || d.RetryAfter != 0 {
		t.Fatalf("empty batch: %+v, %v; want allowed with no results", d, err)
	}
}

func TestMemoryStoreClosed(t *testing.T) {
	s := memstore.New(memstore.Options{})
	it := ratelimit.Item{Key: "k", Algorithm: ratelimit.TokenBucket, Limit: ratelimit.Limit{Rate: 1, Per: time.Second, Burst: 1}, Cost: 1}
	if _, err := s.Decide(context.Background(), []ratelimit.Item{it}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := s.Decide(context.Background(), []ratelimit.Item{it}); !errors.Is(err, ratelimit.ErrUnavailable) {
		t.Fatalf("Decide after Close: err = %v, want one wrapping ErrUnavailable", err)
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("Len after Close = %d, want 0", n)
	}
}

// Items of one key in one batch are evaluated in order, each seeing what
// the earlier ones take, so a batch cannot overdraw a key.
func TestMemoryStoreSameKeyTwiceInBatch(t *testing.T) {
	clock := storetest.NewClock(t0)
	s := memstore.New(memstore.Options{Now: clock.Now})
	defer s.Close()
	l := ratelimit.Limit{Rate: 3, Per: time.Minute}
	it := func(cost int64) ratelimit.Item {
		return ratelimit.Item{Key: "k", Algorithm: ratelimit.FixedWindow, Limit: l, Cost: cost}
	}
	d, err := s.Decide(context.Background(), []ratelimit.Item{it(2), it(2)})
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || !d.Results[0].Allowed || d.Results[1].Allowed {
		t.Fatalf("2+2 of 3: got %+v, want denied by the second item", d)
	}
	if d.Results[0].Remaining != 3 || d.Results[1].Remaining != 1 {
		t.Fatalf("remaining in the denied batch: got %d and %d, want 3 (nothing taken) and 1 (after the first item)",
			d.Results[0].Remaining, d.Results[1].Remaining)
	}
	d, err = s.Decide(context.Background(), []ratelimit.Item{it(2), it(1)})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allowed || d.Results[0].Remaining != 1 || d.Results[1].Remaining != 0 {
		t.Fatalf("2+1 of 3: got %+v, want admitted leaving 1 then 0", d)
	}
}

// A key reused under another algorithm starts afresh instead of
// misreading the other algorithm's state.
func TestMemoryStoreKeyChangesAlgorithm(t *testing.T) {
	clock := storetest.NewClock(t0)
	s := memstore.New(memstore.Options{Now: clock.Now})
	defer s.Close()
	fw := ratelimit.Item{Key: "k", Algorithm: ratelimit.FixedWindow, Limit: ratelimit.Limit{Rate: 3, Per: time.Minute}, Cost: 3}
	tb := ratelimit.Item{Key: "k", Algorithm: ratelimit.TokenBucket, Limit: ratelimit.Limit{Rate: 1, Per: time.Minute, Burst: 2}, Cost: 0}
	for _, it := range []ratelimit.Item{fw, tb} {
		if _, err := s.Decide(context.Background(), []ratelimit.Item{it}); err != nil {
			t.Fatal(err)
		}
	}
	d, err := s.Decide(context.Background(), []ratelimit.Item{tb})
	if err != nil || d.Results[0].Remaining != 2 {
		t.Fatalf("token bucket on a key last used by a fixed window: %+v, %v; want 2 remaining", d, err)
	}
}

// TestMemorySettleIdForgottenAfterWindow: an id is remembered for
// SettleWindow on the store's clock, then applies again.
func TestMemorySettleIdForgottenAfterWindow(t *testing.T) {
	clock := storetest.NewClock(t0)
	s := memstore.New(memstore.Options{Now: clock.Now})
	it := ratelimit.Item{Key: "k", Algorithm: ratelimit.FixedWindow, Limit: ratelimit.Limit{Rate: 100, Per: time.Hour}}
	ss := []ratelimit.Settlement{{Item: it, Delta: 1}}
	for i, c := range []struct {
		after time.Duration
		want  bool
	}{{0, true}, {0, false}, {ratelimit.SettleWindow - time.Microsecond, false}, {ratelimit.SettleWindow, true}} {
		clock.Set(t0.Add(c.after))
		if got, err := s.Settle(context.Background(), "id", ss); err != nil || got != c.want {
			t.Errorf("call %d at +%v: applied = %v, %v; want %v", i, c.after, got, err, c.want)
		}
	}
}
