package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
)

// TestRedisStoreThroughSentinel: with MasterName set, the client discovers
// the primary through a real Sentinel, and decisions are exact there.
func TestRedisStoreThroughSentinel(t *testing.T) {
	primary := redistest.StartStandalone(t)
	sentinel := redistest.StartSentinel(t, primary, "qgmaster")
	client := redisstore.NewRedisClient(redisstore.RedisClientOptions{
		Addrs: []string{sentinel.Addr}, MasterName: "qgmaster", PoolSize: 4,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
	store := redisstore.NewRedisStore(client, redisstore.RedisOptions{Timeout: 2 * time.Second})
	defer store.Close()
	item := ratelimit.Item{Key: "{sentinel-t}:k", Algorithm: ratelimit.TokenBucket,
		Limit: ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 3}, Cost: 1}
	admitted := 0
	for i := 0; i < 5; i++ {
		d, err := store.Decide(context.Background(), []ratelimit.Item{item})
		if err != nil {
			t.Fatalf("decide %d through sentinel: %v", i, err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 3 {
		t.Fatalf("admitted %d of 5 with burst 3", admitted)
	}
	// The state lives on the primary the sentinel named.
	if n, err := primary.Do("EXISTS", "{sentinel-t}:k"); err != nil || n != int64(1) {
		t.Fatalf("key on primary: %v %v", n, err)
	}
}
