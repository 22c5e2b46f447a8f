package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/lease"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// newRedisStore returns a store on its own client for addrs, closed when t
// ends. now nil uses the Redis server clock.
func newRedisStore(t testing.TB, addrs []string, now func() time.Time, timeout time.Duration) *redisstore.RedisStore {
	t.Helper()
	s := redisstore.NewRedisStore(redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: addrs}), redisstore.RedisOptions{Now: now, Timeout: timeout})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestRedisStoreConformanceStandalone(t *testing.T) {
	srv := redistest.StartStandalone(t)
	storetest.Run(t, func(t *testing.T, now func() time.Time) ratelimit.Store {
		return newRedisStore(t, []string{srv.Addr}, now, 0)
	})
}

// TestRedisStoreConformanceUncoalesced runs the suite with every script
// call sent from the calling goroutine.
func TestRedisStoreConformanceUncoalesced(t *testing.T) {
	srv := redistest.StartStandalone(t)
	storetest.Run(t, func(t *testing.T, now func() time.Time) ratelimit.Store {
		s := redisstore.NewRedisStore(redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{srv.Addr}}),
			redisstore.RedisOptions{Now: now, Coalesce: redisstore.CoalesceOptions{Disabled: true}})
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func TestRedisStoreConformanceCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	storetest.Run(t, func(t *testing.T, now func() time.Time) ratelimit.Store {
		return newRedisStore(t, c.Addrs(), now, 0)
	})
}

// TestRedisStoreExpiry runs the expiry suite on the Redis server clock: the
// store ignores the suite's clock (time.Now) and uses TIME.
func TestRedisStoreExpiry(t *testing.T) {
	srv := redistest.StartStandalone(t)
	storetest.RunExpiry(t, func(t *testing.T, _ func() time.Time) ratelimit.Store {
		return newRedisStore(t, []string{srv.Addr}, nil, 0)
	})
}

// TestRedisStackSettles runs the settlement suite through the layers Open
// assembles (stack.Stack, stack.DenialCache, stack.Breaker, lease.Store) over a RedisStore on
// the suite's clock: each passes Settle on.
func TestRedisStackSettles(t *testing.T) {
	srv := redistest.StartStandalone(t)
	storetest.RunSettle(t, func(t *testing.T, now func() time.Time) ratelimit.Store {
		leased := lease.New(newRedisStore(t, []string{srv.Addr}, now, 0), lease.Options{Now: now, SweepEvery: -1})
		br := stack.NewBreaker(leased, stack.BreakerOptions{Now: now})
		s := stack.New(br, stack.Options{Breaker: br, Now: now})
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

// TestRedisSettleAcrossSlots: on a Cluster, one settlement whose keys lie
// in several slots (a route's key and a tenant's) is applied in each slot,
// each under a marker in its own slot, and a retry applies neither again.
func TestRedisSettleAcrossSlots(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	s := newRedisStore(t, c.Addrs(), clock.Now, time.Second)
	prefix := redistest.KeyPrefix(t)
	lim := ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 100}
	items := []ratelimit.Item{
		{Key: prefix + "{route:chat}:tokens", Algorithm: ratelimit.TokenBucket, Limit: lim, Cost: 60},
		{Key: prefix + "{t:acme}:tokens", Algorithm: ratelimit.TokenBucket, Limit: lim, Cost: 60},
	}
	storetest.WarmUp(t, s, items) // takes 60 from each
	ctx := context.Background()
	ss := []ratelimit.Settlement{{Item: items[0], Delta: -50}, {Item: items[1], Delta: 70}}
	for i, want := range []bool{true, false} {
		applied, err := s.Settle(ctx, prefix+"req-1", ss)
		if err != nil || applied != want {
			t.Fatalf("settle %d: applied %v, %v; want %v", i, applied, err, want)
		}
	}
	peek := []ratelimit.Item{items[0], items[1]}
	peek[0].Cost, peek[1].Cost = 0, 0
	peek[0].Shadow, peek[1].Shadow = true, true
	d, err := s.Decide(ctx, peek)
	if err != nil {
		t.Fatal(err)
	}
	if r := d.Results[0]; r.Remaining != 90 {
		t.Errorf("route key after a refund of 50: remaining %d, want 90", r.Remaining)
	}
	if r := d.Results[1]; r.Remaining != 0 || r.Debt != 30 {
		t.Errorf("tenant key after a charge of 70: remaining %d, debt %d; want 0 and 30", r.Remaining, r.Debt)
	}
}

// TestRedisDecidedAtIsServerTime: a store on the server clock reports the
// server's TIME as each result's DecidedAt, and a refund of a reservation
// settled with it comes off that reservation's log entry (the script
// stamped it with the same time), while another time finds no entry.
func TestRedisDecidedAtIsServerTime(t *testing.T) {
	srv := redistest.StartStandalone(t)
	s := newRedisStore(t, []string{srv.Addr}, nil, time.Second)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	it := ratelimit.Item{Key: redistest.KeyPrefix(t) + "{t}:log", Algorithm: ratelimit.SlidingLog, Limit: ratelimit.Limit{Rate: 1000, Per: time.Hour}}
	storetest.WarmUp(t, s, []ratelimit.Item{it}) // cost 0: takes nothing
	before, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	it.Cost = 500
	d, err := s.Decide(ctx, []ratelimit.Item{it})
	if err != nil || !d.Allowed {
		t.Fatalf("reserve: %+v, %v", d, err)
	}
	after, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	at := d.Results[0].DecidedAt
	if at < before.UnixMicro() || at > after.UnixMicro() {
		t.Fatalf("DecidedAt %d µs, want the server's TIME, between %d and %d", at, before.UnixMicro(), after.UnixMicro())
	}
	it.Cost = 0
	remaining := func() int64 {
		t.Helper()
		d, err := s.Decide(ctx, []ratelimit.Item{it})
		if err != nil {
			t.Fatal(err)
		}
		return d.Results[0].Remaining
	}
	for _, c := range []struct {
		id         string
		reservedAt int64
		want       int64
	}{
		{"other-time", at - 1, 500}, // no entry at that time: nothing to give back
		{"reservation", at, 970},
	} {
		if _, err := s.Settle(ctx, redistest.KeyPrefix(t)+c.id, []ratelimit.Settlement{{Item: it, Delta: -470, ReservedAt: c.reservedAt}}); err != nil {
			t.Fatal(err)
		}
		if got := remaining(); got != c.want {
			t.Errorf("after a refund of 470 reserved at %d µs (the reservation's: %d): %d remaining, want %d", c.reservedAt, at, got, c.want)
		}
	}
}
