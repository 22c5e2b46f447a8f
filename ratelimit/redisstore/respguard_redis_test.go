package redisstore_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// hostilePayloads are replies a broken or malicious endpoint in place of
// Redis might send: each declares far more memory than it sends, or
// breaks the grammar.
var hostilePayloads = []struct{ name, payload string }{
	{"array of 2^31-2", "*2147483646\r\n"},
	{"bulk of 2 GB", "$2000000000\r\n"},
	{"map of 2^30", "%1073741823\r\n"},
	{"nested arrays", strings.Repeat("*2147483\r\n", 64)},
	{"deep nesting", strings.Repeat("*1\r\n", 100000)},
	{"endless line", "+" + strings.Repeat("A", 1<<20)},
	{"HTTP", "HTTP/1.1 400 Bad Request\r\n\r\n"},
}

// TestRedisStoreBoundsHostileReplies points a real store at a TCP server
// that answers the connection's set-up, or the script call, or PING, with
// a hostile reply. Every Decide must fail with ErrUnavailable caused by
// ErrReplyBound, at once (no waiting for the payload's declared data),
// with the process's allocations growing by far less than one payload
// declares.
func TestRedisStoreBoundsHostileReplies(t *testing.T) {
	it := tb("{hostile}k", 10, 10, time.Second, 1)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, p := range hostilePayloads {
		for _, at := range []string{"HELLO", "EVALSHA", "PING"} {
			t.Run(p.name+" at "+at, func(t *testing.T) {
				h := redistest.StartHostile(t, []byte(p.payload), at, "EVAL")
				client := redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{h.Addr}, ReadTimeout: 5 * time.Second})
				s := redisstore.NewRedisStore(client, redisstore.RedisOptions{Timeout: 5 * time.Second})
				defer s.Close()
				var err error
				if at == "PING" {
					err = client.Ping(context.Background()).Err()
				} else {
					_, err = s.Decide(context.Background(), []ratelimit.Item{it})
					if !errors.Is(err, ratelimit.ErrUnavailable) {
						t.Fatalf("Decide = %v, want ErrUnavailable", err)
					}
				}
				if !errors.Is(err, redisstore.ErrReplyBound) {
					t.Fatalf("err = %v, want ErrReplyBound in the chain", err)
				}
				if errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("err = %v: the client waited for the declared data", err)
				}
				if h.Answered.Load() == 0 {
					t.Fatal("the hostile server never sent its payload")
				}
			})
		}
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grown := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %d KiB over %d hostile exchanges", grown>>10, 3*len(hostilePayloads))
	if grown > 64<<20 {
		t.Fatalf("allocated %d MiB in total; the payloads were bounded to 16 MiB each and refused before allocation", grown>>20)
	}
}

// TestRedisStoreReusesNoDeadConnection: the guarded connections keep the
// client's health check of pooled connections, so the first decision after
// Redis restarted is decided, not failed on a connection the old server
// closed.
func TestRedisStoreReusesNoDeadConnection(t *testing.T) {
	srv := redistest.StartStandalone(t)
	s := newRedisStore(t, []string{srv.Addr}, nil, 2*time.Second)
	it := tb("{restart}k", 10, 10, time.Second, 1)
	storetest.WarmUp(t, s, []ratelimit.Item{it})
	srv.Restart()
	for i := range 3 {
		if _, err := s.Decide(context.Background(), []ratelimit.Item{it}); err != nil {
			t.Fatalf("decision %d after a restart: %v", i, err)
		}
	}
}
