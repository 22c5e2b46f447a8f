package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
)

// TestRedisStoreWrongPasswordNamesCause checks that a Redis that refuses
// the client's credentials fails decisions with ErrUnavailable carrying
// Redis's own reason (WRONGPASS or NOAUTH), coalesced or not, and that
// Ping says the same.
func TestRedisStoreWrongPasswordNamesCause(t *testing.T) {
	srv := redistest.StartStandaloneWith(t, redistest.Options{Password: "right"})
	it := tb("{auth}k", 10, 10, time.Second, 1)
	for _, c := range []struct {
		name, password string
		want, pingWant string
		coalesce       redisstore.CoalesceOptions
	}{
		{"wrong password", "wrong", "WRONGPASS", "WRONGPASS", redisstore.CoalesceOptions{}},
		{"wrong password, uncoalesced", "wrong", "WRONGPASS", "WRONGPASS", redisstore.CoalesceOptions{Disabled: true}},
		// Redis drops an unauthenticated client that sends a command of
		// more than 10 arguments (a protocol error, then EOF), so only
		// PING gets to say NOAUTH.
		{"no password", "", "", "NOAUTH", redisstore.CoalesceOptions{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			client := redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{srv.Addr}, Password: c.password})
			if err := redisstore.PingRedis(context.Background(), client); !errors.Is(err, ratelimit.ErrUnavailable) || !strings.Contains(err.Error(), c.pingWant) {
				t.Fatalf("PingRedis = %v, want ErrUnavailable naming %s", err, c.pingWant)
			}
			s := redisstore.NewRedisStore(client, redisstore.RedisOptions{Timeout: time.Second, Coalesce: c.coalesce})
			defer s.Close()
			for range 2 { // a fresh connection, then whatever the pool kept
				_, err := s.Decide(context.Background(), []ratelimit.Item{it})
				if !errors.Is(err, ratelimit.ErrUnavailable) || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("Decide = %v, want ErrUnavailable naming %s", err, c.want)
				}
			}
		})
	}
}

// TestPingRedisNamesUnresolvableHost: a Redis address whose host name
// does not resolve (DNS down, a typo, a service removed) is named as such
// by PingRedis, the cause the start's store check logs first; a DNS
// lookup that timed out was reported as "no answer in time", as if Redis
// were slow.
func TestPingRedisNamesUnresolvableHost(t *testing.T) {
	client := redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{"quotagate-test.invalid:6379"}})
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := redisstore.PingRedis(ctx, client)
	if !errors.Is(err, ratelimit.ErrUnavailable) || !strings.Contains(err.Error(), "does not resolve") {
		t.Errorf("PingRedis = %v, want ErrUnavailable saying the host name does not resolve", err)
	}
}
