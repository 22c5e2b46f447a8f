package gateway

import (
	"context"
	"time"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/telemetry"
)

// NewRedisBackend builds the fleet-wide backend: a Redis store (standalone,
// Cluster or Sentinel by the shape of c) under c.Timeout per decision, behind
// a circuit breaker that answers at once while Redis is failing and probes
// it once per cooldown. password is the resolved value of c.PasswordEnv.
func NewRedisBackend(c config.Redis, password string) *Backend {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 25 * time.Millisecond
	}
	client := ratelimit.NewRedisClient(ratelimit.RedisClientOptions{
		Addrs: c.Addrs, MasterName: c.MasterName, Username: c.Username, Password: password,
		PoolSize: c.PoolSize, DialTimeout: max(timeout, 250*time.Millisecond),
		ReadTimeout: timeout, WriteTimeout: timeout,
	})
	store := ratelimit.NewRedisStore(client, ratelimit.RedisOptions{Timeout: timeout})
	breaker := ratelimit.NewBreaker(store, ratelimit.BreakerOptions{Failures: c.BreakerFailures, Cooldown: c.BreakerCooldown})
	cooldown := c.BreakerCooldown
	if cooldown <= 0 {
		cooldown = time.Second
	}
	return &Backend{
		Store: breaker,
		Ping:  func(ctx context.Context) error { return client.Ping(ctx).Err() },
		BreakerState: func() int64 {
			switch breaker.State() {
			case ratelimit.BreakerOpen:
				return telemetry.BreakerOpen
			case ratelimit.BreakerHalfOpen:
				return telemetry.BreakerHalfOpen
			}
			return telemetry.BreakerClosed
		},
		RetryAfter: cooldown,
	}
}
