package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/proxy"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/regional"
	"github.com/quotagate/quotagate/ratelimit/stack"
)

// storeOpener returns the function that opens every stage-2 backend of
// this process (see openStore). They all register in the fleet roster
// under one instance id, so that the gateway and the decision service of
// one process, and a store and the one a reload replaces it with, count as
// one instance, not two. logger receives the stores' operational lines;
// getenv reads the Redis password's variable.
func storeOpener(logger *slog.Logger, getenv func(string) (string, bool)) func(config.Store) (*stack.Stack, error) {
	id := stack.NewInstanceID()
	return func(c config.Store) (*stack.Stack, error) { return openStore(c, id, logger, getenv) }
}

// openStore is the one place that chooses the stage-2 backend: a memory
// store of this process, or Redis (standalone, Cluster or Sentinel by the
// shape of the addresses) for a fleet, registering in its roster as
// instance id. Either comes as a whole stack.Stack, its
// on_store_error fallback included.
func openStore(c config.Store, id string, logger *slog.Logger, getenv func(string) (string, bool)) (*stack.Stack, error) {
	switch c.Kind {
	case config.StoreMemory:
		return stack.New(nil, stack.Options{FleetSize: c.FleetSize}), nil
	case config.StoreRedis:
		r := c.Redis
		password := ""
		if r.PasswordEnv != "" {
			v, ok := getenv(r.PasswordEnv)
			if !ok {
				// A config problem, not a failure to start: exit 1.
				return nil, config.Errors{{Path: "store.redis.password_env", Problem: "environment variable " + r.PasswordEnv + " is not set"}}
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
		var wrap func(ratelimit.Store) ratelimit.Store
		if c.Global != nil {
			var err error
			if wrap, err = regionLayer(c, id, password, tlsConf, logger, getenv); err != nil {
				return nil, err
			}
		}
		return redisstore.Open(redisstore.Config{
			Addrs: r.Addrs, MasterName: r.MasterName, Username: r.Username, Password: password, TLS: tlsConf,
			PoolSize: r.PoolSize, Timeout: r.Timeout,
			BreakerFailures: r.BreakerFailures, BreakerCooldown: r.BreakerCooldown, FleetSize: c.FleetSize,
			FleetStatic: c.Fleet.Static, FleetTTL: c.Fleet.TTL, FleetID: id, KeyPrefix: r.KeyPrefix,
			Logger: logger, Wrap: wrap,
		}), nil
	default:
		return nil, fmt.Errorf("store.kind: unknown kind %q", c.Kind)
	}
}

// regionLayer returns the Stack's top layer of an instance of region
// c.Region (see package regional): its own connections to the regional
// Redis (the grants, the demand, the reporter's lock) and to the global
// one, closed with the layer.
func regionLayer(c config.Store, id, password string, tlsConf *tls.Config, logger *slog.Logger, getenv func(string) (string, bool)) (func(ratelimit.Store) ratelimit.Store, error) {
	r, g := c.Redis, c.Global
	gpass := ""
	if g.Redis.PasswordEnv != "" {
		v, ok := getenv(g.Redis.PasswordEnv)
		if !ok {
			return nil, config.Errors{{Path: "store.global.redis.password_env", Problem: "environment variable " + g.Redis.PasswordEnv + " is not set"}}
		}
		gpass = v
	}
	var gTLS *tls.Config
	if g.Redis.TLS.Enabled {
		var err error
		if gTLS, err = g.Redis.TLS.Files().Config(); err != nil {
			return nil, fmt.Errorf("store.global.redis.tls: %w", err)
		}
	}
	return func(below ratelimit.Store) ratelimit.Store {
		regionalTimeout := max(r.Timeout, 250*time.Millisecond)
		regionalClient := redisstore.NewRedisClient(redisstore.RedisClientOptions{
			Addrs: r.Addrs, MasterName: r.MasterName, Username: r.Username, Password: password, TLS: tlsConf,
			PoolSize: 4, DialTimeout: regionalTimeout, ReadTimeout: regionalTimeout, WriteTimeout: regionalTimeout,
		})
		globalClient := redisstore.NewRedisClient(redisstore.RedisClientOptions{
			Addrs: g.Redis.Addrs, MasterName: g.Redis.MasterName, Username: g.Redis.Username, Password: gpass, TLS: gTLS,
			PoolSize: 4, DialTimeout: g.Redis.Timeout, ReadTimeout: g.Redis.Timeout, WriteTimeout: g.Redis.Timeout,
		})
		layer := regional.New(below, regional.Options{
			Region: c.Region, Regional: regionalClient,
			Owner:          regional.NewOwner(globalClient, regional.OwnerOptions{Prefix: g.Redis.KeyPrefix}),
			ReportInterval: g.ReportInterval, LeaseTTL: g.LeaseTTL, Timeout: g.Redis.Timeout,
			// One reporter per layer, not per process: the gateway and the
			// decision service (and a store a reload retires) each have one.
			Prefix: r.KeyPrefix, ID: id + "/" + stack.NewInstanceID(), Logger: logger,
		})
		return closing{Layer: layer, clients: []io.Closer{regionalClient, globalClient}}
	}, nil
}

// closing is a regional layer that closes its clients after it.
type closing struct {
	*regional.Layer
	clients []io.Closer
}

func (c closing) Close() error {
	err := c.Layer.Close()
	for _, cl := range c.clients {
		_ = cl.Close()
	}
	return err
}

// newTransport is the shared transport to every upstream.
func newTransport(s config.Server) http.RoundTripper {
	return proxy.NewTransport(proxy.TransportOptions{NoDirect: s.UpstreamExchanges == config.ExchangesStandard})
}

// redisLog routes go-redis's own log lines (dial failures while Redis is
// down, which the breaker and metrics already report) to the debug level,
// so an outage does not flood stderr.
type redisLog struct{ logger *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.logger.Log(ctx, slog.LevelDebug, "redis client", slog.String("detail", fmt.Sprintf(format, v...)))
}
