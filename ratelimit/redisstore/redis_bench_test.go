package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/benchloop"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// benchTenants is the number of distinct tenants the benchmarks spread
// their decisions over.
const benchTenants = 1000

// benchItems returns a typical admitted batch for tenant i: a tenant and a
// tenant-route token bucket that share the tenant's hash tag (one script
// call), with capacity high enough never to deny.
func benchItems(prefix string, i int) []ratelimit.Item {
	tag := prefix + "{t" + strconv.Itoa(i) + "}"
	return []ratelimit.Item{
		tb(tag+":tenant", 1_000_000, 1_000_000, time.Second, 1),
		tb(tag+":route:transfers", 1_000_000, 1_000_000, time.Second, 1),
	}
}

// BenchmarkRedisDecide measures admitted decisions against a local
// redis-server at 1, 16, 64 and 256 concurrent callers, with coalescing on
// (the default) and off, reporting throughput, latency percentiles and
// the client's CPU time per decision.
func BenchmarkRedisDecide(b *testing.B) {
	srv := redistest.StartStandalone(b)
	for _, mode := range []string{"coalesced", "uncoalesced"} {
		for _, conc := range []int{1, 16, 64, 256} {
			b.Run(fmt.Sprintf("%s/conc=%d", mode, conc), func(b *testing.B) {
				s := redisstore.NewRedisStore(redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{srv.Addr}}),
					redisstore.RedisOptions{Timeout: time.Second, Coalesce: redisstore.CoalesceOptions{Disabled: mode == "uncoalesced"}})
				b.Cleanup(func() { _ = s.Close() })
				benchDecide(b, s, conc)
			})
		}
	}
}

// benchDecide runs b.N admitted decisions over conc callers. Its CPU
// figure is the benchmark process's (the store, go-redis and the loop
// around them; redis-server runs in a process of its own): what the client
// takes from a host it shares with Redis.
func benchDecide(b *testing.B, s ratelimit.Store, conc int) {
	prefix := redistest.KeyPrefix(b)
	storetest.WarmUp(b, s, benchItems(prefix, 0))
	benchloop.Run(b, conc, "client-cpu-µs/op", func(seq int) error {
		d, err := s.Decide(context.Background(), benchItems(prefix, seq%benchTenants))
		if err == nil && !d.Allowed {
			err = fmt.Errorf("denied: %+v", d)
		}
		return err
	})
}

// commandStat is one command's line of INFO commandstats.
type commandStat struct{ calls, usec int64 }

// commandStats returns, per commandstats name (cmdstat_fcall, ...), the
// calls the server has run and the server time (µs) they took.
func commandStats(tb testing.TB, srv *redistest.Server) map[string]commandStat {
	tb.Helper()
	info, _ := srv.MustDo(tb, "INFO", "commandstats").(string)
	stats := map[string]commandStat{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, rest, _ := strings.Cut(rest, ",usec=")
		us, _, _ := strings.Cut(rest, ",")
		v, err := strconv.ParseInt(n, 10, 64)
		u, err2 := strconv.ParseInt(us, 10, 64)
		if err != nil || err2 != nil {
			tb.Fatalf("commandstats line %q: %v %v", line, err, err2)
		}
		stats[name] = commandStat{v, u}
	}
	return stats
}

// commandCalls returns the number of commands the server has run, from
// INFO commandstats: all of them (those that scripts run included, INFO
// itself left out), the script calls alone (FCALL, EVALSHA and EVAL), which are
// the round trips, and the server time those script calls took, in µs.
func commandCalls(b testing.TB, srv *redistest.Server) (total, scripts, scriptUS int64) {
	for name, st := range commandStats(b, srv) {
		if name == "cmdstat_info" {
			continue
		}
		total += st.calls
		if name == "cmdstat_fcall" || name == "cmdstat_evalsha" || name == "cmdstat_eval" {
			scripts += st.calls
			scriptUS += st.usec
		}
	}
	return total, scripts, scriptUS
}

// BenchmarkRedisCommandsPerDecision counts Redis commands per Decide:
// an admitted one-group batch, and a two-group batch whose second group
// denies (decide, decide, then a refund).
func BenchmarkRedisCommandsPerDecision(b *testing.B) {
	srv := redistest.StartStandalone(b)
	cases := []struct {
		name  string
		items func(prefix string, i int) []ratelimit.Item
	}{
		{"admitted_one_group", benchItems},
		{"denied_second_group", func(prefix string, i int) []ratelimit.Item {
			return []ratelimit.Item{
				tb(prefix+"{route}", 1_000_000, 1_000_000, time.Second, 1),
				tb(prefix+"{tenant}", 1, 1, time.Hour, 1),
			}
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			s := newRedisStore(b, []string{srv.Addr}, nil, time.Second)
			prefix := redistest.KeyPrefix(b)
			storetest.WarmUp(b, s, c.items(prefix, 0)) // loads the script, drains {tenant}
			total0, scripts0, us0 := commandCalls(b, srv)
			b.ResetTimer()
			for i := range b.N {
				if _, err := s.Decide(context.Background(), c.items(prefix, i%benchTenants)); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			total1, scripts1, us1 := commandCalls(b, srv)
			b.ReportMetric(float64(total1-total0)/float64(b.N), "cmds/decision")
			b.ReportMetric(float64(scripts1-scripts0)/float64(b.N), "scripts/decision")
			b.ReportMetric(float64(us1-us0)/float64(b.N), "server-µs/decision")
		})
	}
}

// BenchmarkRedisMemoryPerKey reports MEMORY USAGE of one key per algorithm
// (the sliding log with 10 and with 1000 entries; the sliding window with
// one bucket counted and with all N+1 counted, the most it keeps).
func BenchmarkRedisMemoryPerKey(b *testing.B) {
	srv := redistest.StartStandalone(b)
	var nowUS atomic.Int64
	nowUS.Store(time.Now().UnixMicro())
	s := newRedisStore(b, []string{srv.Addr}, func() time.Time { return time.UnixMicro(nowUS.Load()) }, time.Second)
	win := ratelimit.Limit{Rate: 1000, Per: time.Hour}
	win100 := ratelimit.Limit{Rate: 1000, Per: time.Hour, Buckets: 100}
	cases := []struct {
		name  string
		item  ratelimit.Item
		times int
		step  time.Duration // the clock's advance after each admission
	}{
		{"token_bucket", tb("{m}:tb", 1, 1000, time.Hour, 1), 1, 0},
		{"fixed_window", ratelimit.Item{Key: "{m}:fw", Algorithm: ratelimit.FixedWindow, Limit: win, Cost: 1}, 1, 0},
		{"sliding_window", ratelimit.Item{Key: "{m}:sw", Algorithm: ratelimit.SlidingWindow, Limit: win, Cost: 1}, 1, 0},
		{"sliding_window_11_buckets", ratelimit.Item{Key: "{m}:sw11", Algorithm: ratelimit.SlidingWindow, Limit: win, Cost: 90}, 11, 6 * time.Minute},
		{"sliding_window_101_buckets", ratelimit.Item{Key: "{m}:sw101", Algorithm: ratelimit.SlidingWindow, Limit: win100, Cost: 9}, 101, 36 * time.Second},
		{"sliding_log_10", ratelimit.Item{Key: "{m}:sl10", Algorithm: ratelimit.SlidingLog, Limit: win, Cost: 1}, 10, 0},
		{"sliding_log_1000", ratelimit.Item{Key: "{m}:sl1000", Algorithm: ratelimit.SlidingLog, Limit: win, Cost: 1}, 1000, 0},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			// A fresh key each run: the framework may run this more than once.
			c.item.Key = redistest.KeyPrefix(b) + c.item.Key
			for range c.times {
				if d, err := s.Decide(context.Background(), []ratelimit.Item{c.item}); err != nil || !d.Allowed {
					b.Fatalf("Decide: %+v %v", d, err)
				}
				nowUS.Add(c.step.Microseconds())
			}
			var bytes int64
			for range b.N {
				bytes, _ = srv.MustDo(b, "MEMORY", "USAGE", c.item.Key, "SAMPLES", "0").(int64)
			}
			b.ReportMetric(float64(bytes), "bytes/key")
		})
	}
}

// BenchmarkRedisSettle measures a settlement on Redis after each
// reservation: the reservation's Decide (two token buckets of the
// tenant's tag) and then Settle of a refund on both, reporting the
// commands and script calls the settlement adds per request and its
// client allocations.
func BenchmarkRedisSettle(b *testing.B) {
	srv := redistest.StartStandalone(b)
	s := newRedisStore(b, []string{srv.Addr}, nil, time.Second)
	prefix := redistest.KeyPrefix(b)
	storetest.WarmUp(b, s, benchItems(prefix, 0))
	settle := func(items []ratelimit.Item, d ratelimit.Decision, id string) {
		ss := []ratelimit.Settlement{{Item: items[0], Delta: -1, ReservedAt: d.Results[0].DecidedAt}, {Item: items[1], Delta: -1, ReservedAt: d.Results[1].DecidedAt}}
		if ok, err := s.Settle(context.Background(), id, ss); err != nil || !ok {
			b.Fatalf("settle: %v %v", ok, err)
		}
	}
	var seq atomic.Int64 // ids stay unique across the runs of a sub-benchmark
	for _, withSettle := range []bool{false, true} {
		name := "decide_only"
		if withSettle {
			name = "decide_and_settle"
		}
		b.Run(name, func(b *testing.B) {
			total0, scripts0, us0 := commandCalls(b, srv)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				items := benchItems(prefix, i%benchTenants)
				d, err := s.Decide(context.Background(), items)
				if err != nil {
					b.Fatal(err)
				}
				if withSettle {
					settle(items, d, prefix+strconv.FormatInt(seq.Add(1), 10))
				}
			}
			b.StopTimer()
			total1, scripts1, us1 := commandCalls(b, srv)
			b.ReportMetric(float64(total1-total0)/float64(b.N), "cmds/request")
			b.ReportMetric(float64(scripts1-scripts0)/float64(b.N), "scripts/request")
			b.ReportMetric(float64(us1-us0)/float64(b.N), "server-µs/request")
		})
	}
}

// BenchmarkRedisDecideClusterUncoalesced is the client's cost (allocs/op,
// B/op) of one admitted decision on a Cluster of 3 primaries with
// coalescing off, sent from the caller's goroutine (see sendAlone).
func BenchmarkRedisDecideClusterUncoalesced(b *testing.B) {
	c := redistest.StartCluster(b, 3)
	s := redisstore.NewRedisStore(redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: c.Addrs(), DialTimeout: time.Second}),
		redisstore.RedisOptions{Timeout: time.Second, Coalesce: redisstore.CoalesceOptions{Disabled: true}})
	b.Cleanup(func() { _ = s.Close() })
	prefix := redistest.KeyPrefix(b)
	items := benchItems(prefix, 0)
	storetest.WarmUp(b, s, items)
	b.ReportAllocs()
	for b.Loop() {
		if d, err := s.Decide(context.Background(), items); err != nil || !d.Allowed {
			b.Fatalf("decide: %+v, %v", d, err)
		}
	}
}
