package redisstore

import (
	"context"
	"crypto/tls"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/ratelimit"
)

// Config describes a Redis decision backend: a standalone server, a Cluster
// or a primary followed through Sentinels, by the shape of Addrs and
// MasterName (see RedisClientOptions).
type Config struct {
	Addrs              []string
	MasterName         string
	Username, Password string
	// TLS, when not nil, makes every connection use TLS with it (see
	// ratelimit.RedisTLSFiles); nil is plain TCP.
	TLS *tls.Config
	// PoolSize is the number of connections per node; 0 means 10 per CPU.
	PoolSize int
	// Timeout is the deadline of one decision, socket reads and writes
	// included; it must be > 0. Connecting is allowed max(Timeout, 250ms).
	Timeout time.Duration
	// BreakerFailures consecutive failures open the circuit breaker, which
	// lets a probe through after BreakerCooldown (see ratelimit.Breaker).
	BreakerFailures int
	BreakerCooldown time.Duration
	// Now is the clock of the stack's local shares (on_store_error local);
	// nil = time.Now. Redis decides on its own clock.
	Now func() time.Time
	// FleetSize is the number of instances sharing Redis; it sizes the
	// local shares (see ratelimit.FallbackOptions). 0 or less means 1.
	FleetSize int
	// Hook, when not nil, is added to the client and sees every command
	// and pipeline the store sends (a benchmark counts calls with it).
	Hook redis.Hook
}

// Open builds the fleet-wide decision stack on Redis: a RedisStore (script
// calls coalesced into pipelines, one queue per Cluster primary) under
// c.Timeout per decision, with token leases for the items that ask for
// them, behind a circuit breaker with one failure domain per Cluster
// primary (the primary owning a batch's last key, the tenant's slot), under
// a ratelimit.Fallback. It does not connect until the first decision.
func Open(c Config) *ratelimit.Stack {
	client := NewRedisClient(RedisClientOptions{
		Addrs: c.Addrs, MasterName: c.MasterName, Username: c.Username, Password: c.Password,
		PoolSize: c.PoolSize, DialTimeout: max(c.Timeout, 250*time.Millisecond),
		ReadTimeout: c.Timeout, WriteTimeout: c.Timeout, TLS: c.TLS,
	})
	if c.Hook != nil {
		client.AddHook(c.Hook)
	}
	store := NewRedisStore(client, RedisOptions{Timeout: c.Timeout})
	// Items with a lease admit from blocks this instance reserved; the
	// others pass through to Redis on every decision.
	leased := ratelimit.NewLeaseStore(store, ratelimit.LeaseOptions{})
	bo := ratelimit.BreakerOptions{Failures: c.BreakerFailures, Cooldown: c.BreakerCooldown}
	if _, ok := client.(*redis.ClusterClient); ok {
		bo.Partition = func(ctx context.Context, items []ratelimit.Item) string {
			if len(items) == 0 {
				return ""
			}
			return store.Primary(ctx, items[len(items)-1].Key)
		}
	}
	breaker := ratelimit.NewBreaker(leased, bo)
	return ratelimit.NewStack(breaker, ratelimit.StackOptions{
		Breaker:   breaker,
		Slots:     store,
		Ping:      func(ctx context.Context) error { return PingRedis(ctx, client) },
		Now:       c.Now,
		FleetSize: c.FleetSize,
	})
}
