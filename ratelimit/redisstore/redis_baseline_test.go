package redisstore

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
)

// baselineArgs is the FCALL that redis-benchmark repeats: the same
// decision as the store benchmarks (two token buckets of 1,000,000 units,
// cost 1, on the server clock), on keys spread over 1000 random tags.
func baselineArgs() []string {
	item := "1,1000000,1000000,1000000,1,0,0,0,0"
	return []string{"fcall", libraryName, "2", "{t__rand_int__}:tenant", "{t__rand_int__}:route:transfers", modeDecide, "", item, item}
}

// BenchmarkRedisBaseline runs redis-benchmark with 16-command pipelines
// of the store's own script call, the ceiling the store is compared with.
// It reports redis-benchmark's requests per second; b.N is ignored.
func BenchmarkRedisBaseline(b *testing.B) {
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		b.Skip("redis-benchmark not on PATH")
	}
	srv := redistest.StartStandalone(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	if err := loadLibrary(context.Background(), c); err != nil {
		b.Fatal(err)
	}
	errs0, _ := c.Info(context.Background(), "errorstats").Result()
	host, port, _ := strings.Cut(srv.Addr, ":")
	args := append([]string{"-h", host, "-p", port, "-P", "16", "-n", "200000", "-r", "1000", "--csv"}, baselineArgs()...)
	b.Logf("%s %s", bin, strings.Join(args, " "))
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		b.Fatalf("redis-benchmark: %v\n%s", err, out)
	}
	// CSV: a header line, then "test","rps",...
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	fields := strings.Split(lines[len(lines)-1], ",")
	if len(fields) < 2 {
		b.Fatalf("unexpected output:\n%s", out)
	}
	rps, err := strconv.ParseFloat(strings.Trim(fields[1], `"`), 64)
	if err != nil {
		b.Fatalf("unexpected output:\n%s", out)
	}
	if errs, _ := c.Info(context.Background(), "errorstats").Result(); errs != errs0 {
		b.Fatalf("the script failed under redis-benchmark: %s", errs)
	}
	stats, _ := c.Info(context.Background(), "commandstats").Result()
	if !strings.Contains(stats, "cmdstat_fcall:calls=200000,") || !strings.Contains(stats, "failed_calls=0") {
		b.Fatalf("redis-benchmark did not run the script 200000 times:\n%s", stats)
	}
	b.ReportMetric(rps, "decisions/s")
}
