package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/proxy"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
)

// openStore is the one place that chooses the stage-2 backend: a memory
// store of this process, or Redis (standalone, Cluster or Sentinel by the
// shape of the addresses) for a fleet. Either comes as a whole
// ratelimit.Stack, its on_store_error fallback included.
func openStore(c config.Store) (*ratelimit.Stack, error) {
	switch c.Kind {
	case "memory":
		return ratelimit.NewStack(nil, ratelimit.StackOptions{FleetSize: c.FleetSize}), nil
	case "redis":
		r := c.Redis
		password := ""
		if r.PasswordEnv != "" {
			v, ok := os.LookupEnv(r.PasswordEnv)
			if !ok {
				return nil, fmt.Errorf("store.redis.password_env: environment variable %s is not set", r.PasswordEnv)
			}
			password = v
		}
		var tlsConf *tls.Config
		if r.TLS.Enabled {
			var err error
			if tlsConf, err = r.TLS.Files().Config(); err != nil {
				return nil, fmt.Errorf("store.redis.tls: %w", err)
			}
		}
		return redisstore.Open(redisstore.Config{
			Addrs: r.Addrs, MasterName: r.MasterName, Username: r.Username, Password: password, TLS: tlsConf,
			PoolSize: r.PoolSize, Timeout: r.Timeout,
			BreakerFailures: r.BreakerFailures, BreakerCooldown: r.BreakerCooldown, FleetSize: c.FleetSize,
			FleetStatic: c.Fleet.Static, FleetTTL: c.Fleet.TTL, KeyPrefix: r.KeyPrefix,
		}), nil
	default:
		return nil, fmt.Errorf("store.kind: unknown kind %q", c.Kind)
	}
}

// newTransport is the shared transport to every upstream.
func newTransport() http.RoundTripper {
	return proxy.NewTransport(proxy.TransportOptions{})
}

// redisLog routes go-redis's own log lines (dial failures while Redis is
// down, which the breaker and metrics already report) to the debug level,
// so an outage does not flood stderr.
type redisLog struct{ logger *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.logger.Log(ctx, slog.LevelDebug, "redis client", slog.String("detail", fmt.Sprintf(format, v...)))
}
