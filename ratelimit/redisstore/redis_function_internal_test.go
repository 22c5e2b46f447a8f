package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// TestRedisStoreConformanceEvalsha runs the conformance suite on a
// server whose stores send every call as EVALSHA, the mode of a server
// without Redis functions: the script and the function library are one
// source, so they must decide alike. The server ran no FCALL, or the
// suite proved nothing about EVALSHA.
func TestRedisStoreConformanceEvalsha(t *testing.T) {
	srv := redistest.StartStandalone(t)
	storetest.Run(t, func(t *testing.T, now func() time.Time) ratelimit.Store {
		s := NewRedisStore(NewRedisClient(RedisClientOptions{Addrs: []string{srv.Addr}}), RedisOptions{Now: now})
		s.run.pinEvalsha()
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
	stats, _ := srv.MustDo(t, "INFO", "commandstats").(string)
	if !strings.Contains(stats, "cmdstat_evalsha:calls=") || strings.Contains(stats, "cmdstat_fcall:calls=") {
		t.Errorf("commandstats show no EVALSHA, or an FCALL:\n%s", stats)
	}
}

// TestRollingDeployCoexists: a gateway of another version, with a library
// of its own already loaded, and a gateway still on EVALSHA share a server
// and keys with a gateway on the function library. Loading the library
// replaces nothing, the other library still answers, and decisions of the
// two modes interleaved on one bucket admit exactly its burst.
func TestRollingDeployCoexists(t *testing.T) {
	srv := redistest.StartStandalone(t)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	const other = "quotagate_000000000000"
	if err := admin.FunctionLoad(ctx, "#!lua name="+other+"\nredis.register_function('"+other+"', function() return 7 end)\n").Err(); err != nil {
		t.Fatal(err)
	}
	fn := NewRedisStore(NewRedisClient(RedisClientOptions{Addrs: []string{srv.Addr}}), RedisOptions{Timeout: 10 * time.Second})
	defer fn.Close()
	old := NewRedisStore(NewRedisClient(RedisClientOptions{Addrs: []string{srv.Addr}}), RedisOptions{Timeout: 10 * time.Second})
	defer old.Close()
	old.run.pinEvalsha()

	it := ratelimit.Item{Key: redistest.KeyPrefix(t) + "{roll}k", Algorithm: ratelimit.TokenBucket,
		Limit: ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 10}, Cost: 1}
	admitted := 0
	for i := range 20 {
		s := fn
		if i%2 == 1 {
			s = old
		}
		d, err := s.Decide(ctx, []ratelimit.Item{it})
		if err != nil {
			t.Fatalf("decision %d: %v", i, err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 10 {
		t.Errorf("admitted %d of 20 on a burst of 10, want 10", admitted)
	}
	// Both modes ran: otherwise the interleaving proves nothing.
	if stats := admin.Info(ctx, "commandstats").Val(); !strings.Contains(stats, "cmdstat_evalsha:calls=") || !strings.Contains(stats, "cmdstat_fcall:calls=") {
		t.Errorf("commandstats show no EVALSHA or no FCALL:\n%s", stats)
	}
	libs, err := admin.FunctionList(ctx, redis.FunctionListQuery{}).Result()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, l := range libs {
		names[l.Name] = true
	}
	if len(names) != 2 || !names[other] || !names[libraryName] {
		t.Errorf("libraries %v, want %s and %s", names, other, libraryName)
	}
	if v, err := admin.FCall(ctx, other, nil).Int(); err != nil || v != 7 {
		t.Errorf("the other version's function answers %d, %v; want 7", v, err)
	}
}

// pinEvalsha makes r send every call as EVALSHA, for good (on a Cluster
// to every primary): fallen back, on a clock that never reaches the next
// try of FCALL. It must be called before r sends anything.
func (r *runner) pinEvalsha() {
	t := time.Unix(1_700_000_000, 0)
	r.now = func() time.Time { return t }
	r.startSince = unixStamp(t)
	r.one.evalshaSince.Store(r.startSince)
}
