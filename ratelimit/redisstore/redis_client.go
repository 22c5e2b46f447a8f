package redisstore

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisClientOptions describes how to reach Redis.
type RedisClientOptions struct {
	// Addrs are host:port addresses. One address is a standalone server;
	// several are cluster seed nodes; with MasterName set they are
	// Sentinels.
	Addrs []string
	// MasterName, when set, selects Sentinel: the client follows the
	// primary that the Sentinels at Addrs name.
	MasterName string
	// Username and Password authenticate (ACL user, or Password alone for
	// requirepass) to the Redis servers, not to the Sentinels.
	Username, Password string
	// PoolSize is the number of connections per node; 0 means 10 per CPU.
	PoolSize int
	// DialTimeout bounds connecting; 0 means 250ms. It is short so that a
	// dead server fails fast.
	DialTimeout time.Duration
	// ReadTimeout and WriteTimeout bound socket reads and writes when the
	// caller's context has no earlier deadline; 0 means 1s.
	ReadTimeout, WriteTimeout time.Duration
	// TLS, when not nil, makes every connection (to Sentinels too) use
	// TLS with this configuration; an empty ServerName is set to the host
	// of the address dialled. nil means plain TCP.
	TLS *tls.Config
	// Limits bounds every reply read on every connection (see
	// ReplyLimits); the zero value takes its defaults.
	Limits ReplyLimits
}

// NewRedisClient returns a client suited to RedisStore: it never retries a
// command (a retried decision could consume twice; the store's deadline is
// short anyway), honours context deadlines on socket reads and writes, and
// sends every command to primaries (cluster ReadOnly, RouteByLatency and
// RouteRandomly off). Every reply it reads is bounded by o.Limits: one
// that is not fails its command with an error wrapping ErrReplyBound and
// the connection is dropped. It does not connect until first used.
func NewRedisClient(o RedisClientOptions) redis.UniversalClient {
	or := func(d, def time.Duration) time.Duration {
		if d > 0 {
			return d
		}
		return def
	}
	dialTimeout := or(o.DialTimeout, 250*time.Millisecond)
	return redis.NewUniversalClient(&redis.UniversalOptions{
		Dialer:                guardDialer(redisDialer(dialTimeout, o.TLS), o.Limits),
		Addrs:                 o.Addrs,
		MasterName:            o.MasterName,
		Username:              o.Username,
		Password:              o.Password,
		PoolSize:              o.PoolSize,
		DialTimeout:           dialTimeout,
		ReadTimeout:           or(o.ReadTimeout, time.Second),
		WriteTimeout:          or(o.WriteTimeout, time.Second),
		ContextTimeoutEnabled: true,
		MaxRetries:            -1, // go-redis: -1 disables retries
		DialerRetries:         1,
		// go-redis's Cluster client also retries a command whose connection
		// failed (EOF, reset, dial error) under MaxRedirects, and such a
		// command may already have run: a decision retried that way could
		// consume twice. So no redirects at all (-1 means 0): a MOVED after
		// a resharding fails that one decision (its policy's on_store_error
		// applies) and makes the client reload the slot map for the next.
		MaxRedirects:   -1,
		ReadOnly:       false,
		RouteByLatency: false,
		RouteRandomly:  false,
	})
}

// redisDialer connects within timeout (TCP connect and TLS handshake
// together), with TLS when tlsConf is not nil.
func redisDialer(timeout time.Duration, tlsConf *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		c, err := d.DialContext(ctx, network, addr)
		if err != nil || tlsConf == nil {
			return c, err
		}
		conf := tlsConf
		if conf.ServerName == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				host = addr
			}
			conf = conf.Clone()
			conf.ServerName = host
		}
		tc := tls.Client(c, conf)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("tls handshake with %s: %w", addr, err)
		}
		return tc, nil
	}
}
