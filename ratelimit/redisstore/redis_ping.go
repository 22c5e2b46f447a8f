package redisstore

import (
	"github.com/quotagate/quotagate/ratelimit"

	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// PingRedis sends PING with client and returns nil on PONG. Otherwise it
// returns an error wrapping ratelimit.ErrUnavailable and the client's error, whose
// text starts with the cause in words where it is one an operator can
// fix: a wrong password (WRONGPASS), a missing one (NOAUTH), a refused
// connection, a host name that does not resolve, a failed TLS handshake,
// a connection closed without a reply (as a TLS-only server does to plain
// TCP), an endpoint that is not Redis, or no answer before ctx's deadline.
//
// On a Cluster it sends PING to every primary at once and returns nil as
// soon as one answers: the store answers while any primary does (as the
// breaker counts the store down only when every primary's domain is
// open). A lone PING would go to the owner of a random slot, so that
// with one primary of three dead, a third of the checks would fail.
func PingRedis(ctx context.Context, client redis.UniversalClient) error {
	var err error
	if cc, ok := client.(*redis.ClusterClient); ok {
		err = pingAnyPrimary(ctx, cc)
	} else {
		err = client.Ping(ctx).Err()
	}
	if err == nil {
		return nil
	}
	if cause := redisCause(err); cause != "" {
		return fmt.Errorf("%w: %s: %w", ratelimit.ErrUnavailable, cause, err)
	}
	return fmt.Errorf("%w: %w", ratelimit.ErrUnavailable, err)
}

// redisCause names the cause of a client error, or returns "".
func redisCause(err error) string {
	msg := err.Error()
	var (
		certErr  *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		record   tls.RecordHeaderError
		alert    tls.AlertError
		dnsErr   *net.DNSError
		netErr   net.Error
	)
	switch {
	case strings.Contains(msg, "WRONGPASS"):
		return "Redis refused the credentials (WRONGPASS): check store.redis.username and the password in store.redis.password_env"
	case strings.Contains(msg, "NOAUTH"):
		return "Redis requires a password (NOAUTH): set store.redis.password_env"
	case errors.As(err, &dnsErr):
		// Before the timeout case: a DNS lookup that timed out is not
		// a Redis that does not answer.
		return "the host name does not resolve (DNS): check store.redis.addrs and the resolver"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused: nothing listens at the address"
	case errors.Is(err, ErrReplyBound):
		return "the endpoint's reply is not a bounded Redis reply (a wrong port, or not Redis)"
	case errors.As(err, &certErr), errors.As(err, &unknown), errors.As(err, &hostname), errors.As(err, &alert):
		return "TLS handshake failed (check store.redis.tls)"
	case errors.As(err, &record):
		return "the server does not speak TLS (check store.redis.tls.enabled)"
	case strings.Contains(msg, "tls handshake"), strings.Contains(msg, "tls: "):
		return "TLS handshake failed (check store.redis.tls)"
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
		return "the server closed the connection without a reply (does it require TLS? see store.redis.tls)"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "no answer in time"
	}
	return ""
}

// pingAnyPrimary sends PING to every primary of cc concurrently and
// returns nil once one answers, without waiting for the others (they end
// with ctx); otherwise, once all have failed, the first failure (or the
// failure to learn the primaries).
func pingAnyPrimary(ctx context.Context, cc *redis.ClusterClient) error {
	answered := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var first error
	all := make(chan error, 1)
	go func() {
		all <- cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			if err := c.Ping(ctx).Err(); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				return nil
			}
			once.Do(func() { close(answered) })
			return nil
		})
	}()
	select {
	case <-answered:
		return nil
	case err := <-all:
		select {
		case <-answered:
			return nil
		default:
		}
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if first == nil {
			return errors.New("redis cluster: no primary known")
		}
		return first
	}
}
