package gateway

import (
	"context"
	"crypto/tls"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/telemetry"
)

// NewRedisBackend builds the fleet-wide backend: a Redis store (standalone,
// Cluster or Sentinel by the shape of c) under c.Timeout per decision, with
// token leases for the policies that ask for them, behind a circuit breaker that answers at once while Redis is failing and probes
// it once per cooldown. password is the resolved value of c.PasswordEnv;
// tlsConf is c.TLS loaded (nil: plain TCP).
func NewRedisBackend(c config.Redis, password string, tlsConf *tls.Config) *Backend {
	timeout := c.Timeout
	client := ratelimit.NewRedisClient(ratelimit.RedisClientOptions{
		Addrs: c.Addrs, MasterName: c.MasterName, Username: c.Username, Password: password,
		PoolSize: c.PoolSize, DialTimeout: max(timeout, 250*time.Millisecond),
		ReadTimeout: timeout, WriteTimeout: timeout, TLS: tlsConf,
	})
	store := ratelimit.NewRedisStore(client, ratelimit.RedisOptions{Timeout: timeout})
	// Policies with a lease option admit from blocks this instance reserved;
	// the others pass through to Redis on every request.
	leased := ratelimit.NewLeaseStore(store, ratelimit.LeaseOptions{})
	breaker := ratelimit.NewBreaker(leased, ratelimit.BreakerOptions{
		Failures: c.BreakerFailures, Cooldown: c.BreakerCooldown, Partition: clusterPartition(client)})
	return &Backend{
		Store: breaker,
		Ping:  func(ctx context.Context) error { return ratelimit.PingRedis(ctx, client) },
		BreakerState: func() int64 {
			switch breaker.State() {
			case ratelimit.BreakerOpen:
				return telemetry.BreakerOpen
			case ratelimit.BreakerHalfOpen:
				return telemetry.BreakerHalfOpen
			}
			return telemetry.BreakerClosed
		},
		AllDown:    breaker.AllOpen,
		RetryAfter: c.BreakerCooldown,
	}
}

// clusterPartition gives a Redis Cluster's breaker one failure domain per
// primary: a batch belongs to the primary that owns its last item's key
// (the tenant's slot, which the gateway puts last). Other clients have one
// domain.
func clusterPartition(client redis.UniversalClient) func([]ratelimit.Item) string {
	cc, ok := client.(*redis.ClusterClient)
	if !ok {
		return nil
	}
	return func(items []ratelimit.Item) string {
		if len(items) == 0 {
			return ""
		}
		node, err := cc.MasterForKey(context.Background(), items[len(items)-1].Key)
		if err != nil {
			return ""
		}
		return node.Options().Addr
	}
}
