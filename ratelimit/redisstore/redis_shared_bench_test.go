package redisstore

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
)

// BenchmarkDecideShared measures what the gateway's process spends on
// decisions that share pipelines: callers goroutines decide at once
// (b.N decisions in all, each of two token buckets of a tenant's hash
// tag, 1000 tenants), so that a pipeline carries several calls; and, so
// that the sharing does not depend on the scheduler, batch=16 sends 16
// calls as one pipeline from one goroutine (the path of queued calls that
// one writer takes together), as FCALLs and, evalsha/batch=16, as the
// EVALSHA script, whose 16 plain decisions merge into one script call.
// It reports allocations, and pipelines per decision from the server's
// count of reads (INFO total_reads_processed; batch=16 is 1/16 by
// construction).
//
// Its instruction count is the deterministic measure: run it under
// callgrind at two iteration counts and divide the difference (see
// BENCHMARKS.md). QG_BENCH_REDIS names a running redis-server to use
// instead of starting one.
func BenchmarkDecideShared(b *testing.B) {
	addr := os.Getenv("QG_BENCH_REDIS")
	if addr == "" {
		addr = redistest.StartStandalone(b).Addr
	}
	items := make([][]ratelimit.Item, 1000)
	for i := range items {
		tag := "{bs" + strconv.Itoa(i) + "}"
		lim := ratelimit.Limit{Rate: 1_000_000, Per: time.Second, Burst: 1_000_000}
		items[i] = []ratelimit.Item{
			{Key: tag + ":tenant", Algorithm: ratelimit.TokenBucket, Limit: lim, Cost: 1},
			{Key: tag + ":route", Algorithm: ratelimit.TokenBucket, Limit: lim, Cost: 1},
		}
	}
	info := redis.NewClient(&redis.Options{Addr: addr})
	b.Cleanup(func() { _ = info.Close() })
	reads := func() int64 {
		s, err := info.Info(context.Background(), "stats").Result()
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(s, "\r\n") {
			if v, ok := strings.CutPrefix(line, "total_reads_processed:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		b.Fatal("no total_reads_processed in INFO stats")
		return 0
	}
	newStore := func(b *testing.B) *RedisStore {
		s := NewRedisStore(NewRedisClient(RedisClientOptions{Addrs: []string{addr}}), RedisOptions{Timeout: 10 * time.Second})
		b.Cleanup(func() { _ = s.Close() })
		if d, err := s.Decide(context.Background(), items[0]); err != nil || !d.Allowed {
			b.Fatalf("warm-up: %+v %v", d, err)
		}
		return s
	}
	report := func(b *testing.B, r0 int64) {
		b.StopTimer()
		b.ReportMetric(float64(reads()-r0-1)/float64(b.N), "reads/decision")
	}
	for _, callers := range []int{1, 16} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			s := newStore(b)
			var wg sync.WaitGroup
			b.ReportAllocs()
			r0 := reads()
			b.ResetTimer()
			for g := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := g; i < b.N; i += callers {
						if d, err := s.Decide(context.Background(), items[i%len(items)]); err != nil || !d.Allowed {
							b.Errorf("decide: %+v %v", d, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			report(b, r0)
		})
	}
	for _, evalsha := range []bool{false, true} {
		name := "batch=16"
		if evalsha {
			name = "evalsha/batch=16"
		}
		b.Run(name, func(b *testing.B) { benchBatch16(b, newStore(b), evalsha, items, reads, report) })
	}
}

// benchBatch16 is BenchmarkDecideShared's batch=16 case, on s: as
// FCALLs, or, with evalsha, as the EVALSHA script: one pipeline of 16
// script calls either way.
func benchBatch16(b *testing.B, s *RedisStore, evalsha bool, items [][]ratelimit.Item, reads func() int64, report func(*testing.B, int64)) {
	const batch = 16
	if evalsha {
		s.run.pinEvalsha()
		if err := decideScript.Load(context.Background(), s.client).Err(); err != nil {
			b.Fatal(err)
		}
	}
	calls := make([]*scriptCall, batch)
	idx := []int{0, 1}
	b.ReportAllocs()
	r0 := reads()
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		n := min(batch, b.N-i)
		bd := newBound(context.Background(), 10*time.Second)
		for k := range n {
			calls[k] = s.getCall(bd)
			calls[k].build(modeDecideShort, 0, false, items[(i+k)%len(items)], idx, nil)
		}
		vals, errs := s.exchange(calls[:n])
		for k := range n {
			if errs[k] != nil {
				b.Fatal(errs[k])
			}
			var res [2]ratelimit.Result
			var ext [2]itemReply
			if ok, err := parseReply(vals[k], items[(i+k)%len(items)], idx, res[:], ext[:], true); err != nil || !ok {
				b.Fatalf("reply: %v %v", ok, err)
			}
		}
	}
	report(b, r0)
}
