package redisstore_test

import (
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
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
// assembles (Stack, DenialCache, Breaker, LeaseStore) over a RedisStore on
// the suite's clock: each passes Settle on.
func TestRedisStackSettles(t *testing.T) {
	srv := redistest.StartStandalone(t)
	storetest.RunSettle(t, func(t *testing.T, now func() time.Time) ratelimit.Store {
		leased := ratelimit.NewLeaseStore(newRedisStore(t, []string{srv.Addr}, now, 0), ratelimit.LeaseOptions{Now: now, SweepEvery: -1})
		br := ratelimit.NewBreaker(leased, ratelimit.BreakerOptions{Now: now})
		s := ratelimit.NewStack(br, ratelimit.StackOptions{Breaker: br, Now: now})
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
