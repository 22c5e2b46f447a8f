package redisstore

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
)

// BenchmarkRedisServerInstructions reports the instructions redis-server
// executes per decision, counted by valgrind's callgrind: a deterministic
// measure of the server's cost, unlike INFO commandstats' usec on a busy
// machine. Each case starts redis-server (at hz 1) under callgrind
// twice, runs 200 and then 1200 sequential decisions through a RedisStore
// (uncoalesced, on the server clock, one admitted token-bucket item per
// hash tag and call, on fixed keys) and reports the difference per
// decision, so that start-up and shutdown cancel out. Cases: the decision
// as an FCALL of the library and as the EVALSHA fallback, with one and
// two items; and as an FCALL, one concurrency item (the same holder each
// time) and one token bucket reservation whose want changes with every
// decision (1000 values in turn). The pipeline=32 cases send the
// decisions (one token bucket each, on 32 keys) in pipelines of 32 from
// an uncoalesced store, as EVALSHA and as FCALL: one script call per
// decision either way.
//
// It is slow (about a minute per case on a quiet machine) and runs only
// when QG_CALLGRIND is set and valgrind is on PATH; b.N is ignored:
//
//	QG_CALLGRIND=1 go test -run '^$' -bench RedisServerInstructions -benchtime 1x ./ratelimit/redisstore/
func BenchmarkRedisServerInstructions(b *testing.B) {
	if os.Getenv("QG_CALLGRIND") == "" {
		b.Skip("set QG_CALLGRIND=1 to count redis-server's instructions under valgrind (slow)")
	}
	valgrind, err := exec.LookPath("valgrind")
	if err != nil {
		b.Skip("valgrind not on PATH")
	}
	// Each decide makes per decisions.
	runPer := func(name string, evalsha bool, per int, decide callgrindDecide) {
		b.Run(name, func(b *testing.B) {
			const few, many = 200, 1200
			lo := callgrindRun(b, valgrind, evalsha, decide, few/per)
			hi := callgrindRun(b, valgrind, evalsha, decide, many/per)
			b.ReportMetric(float64(hi-lo)/float64((many/per-few/per)*per), "instructions/decision")
		})
	}
	run := func(name string, evalsha bool, decide callgrindDecide) { runPer(name, evalsha, 1, decide) }
	for _, mode := range []string{"fcall", "evalsha"} {
		for _, n := range []int{1, 2} {
			run(fmt.Sprintf("%s/items=%d", mode, n), mode == "evalsha", decideBuckets(n))
		}
	}
	run("fcall/concurrency", false, func(ctx context.Context, s *RedisStore, _ int) (ratelimit.Decision, error) {
		return s.Decide(ctx, []ratelimit.Item{{Key: "{cg}:slots", Algorithm: ratelimit.Concurrency,
			Limit: ratelimit.Limit{Max: 2, Per: time.Minute}, Cost: 1, Holder: "h"}})
	})
	run("fcall/reserve_varying_want", false, func(ctx context.Context, s *RedisStore, i int) (ratelimit.Decision, error) {
		d, _, err := s.DecideReserve(ctx, []ratelimit.Item{{Key: "{cg}:0", Algorithm: ratelimit.TokenBucket,
			Limit: ratelimit.Limit{Rate: 10_000_000, Per: time.Second, Burst: 10_000_000}, Cost: 1}}, []int64{2 + int64(i%1000)})
		return d, err
	})
	// Pipelines of 32 decisions, as EVALSHA and as FCALL.
	runPer("evalsha/pipeline=32", true, 32, decidePipelined(32))
	runPer("fcall/pipeline=32", false, 32, decidePipelined(32))
}

// decidePipelined makes calls decisions of one token bucket each (of
// distinct keys) as one pipeline: the path of the decisions one writer
// takes from the queue together.
func decidePipelined(calls int) callgrindDecide {
	items := make([][]ratelimit.Item, calls)
	for k := range items {
		items[k] = []ratelimit.Item{{Key: fmt.Sprintf("{cg%d}:0", k), Algorithm: ratelimit.TokenBucket,
			Limit: ratelimit.Limit{Rate: 1_000_000, Per: time.Second, Burst: 1_000_000}, Cost: 1}}
	}
	idx := []int{0}
	return func(ctx context.Context, s *RedisStore, _ int) (ratelimit.Decision, error) {
		cs := make([]*scriptCall, calls)
		for k := range cs {
			cs[k] = s.getCall(newBound(ctx, time.Minute))
			cs[k].build(modeDecideShort, 0, false, items[k], idx, nil)
		}
		vals, errs := s.exchange(cs)
		for k := range vals {
			if errs[k] != nil {
				return ratelimit.Decision{}, errs[k]
			}
			var res [1]ratelimit.Result
			if ok, err := parseReply(vals[k], items[k], idx, res[:], nil, true); err != nil || !ok {
				return ratelimit.Decision{}, fmt.Errorf("decision %d: admitted %v, %v", k, ok, err)
			}
		}
		return ratelimit.Decision{Allowed: true}, nil
	}
}

// callgrindDecide makes the i-th decision of a callgrindRun.
type callgrindDecide func(ctx context.Context, s *RedisStore, i int) (ratelimit.Decision, error)

// decideBuckets decides on items admitted token buckets of fixed keys.
func decideBuckets(items int) callgrindDecide {
	batch := make([]ratelimit.Item, items)
	for i := range batch {
		batch[i] = ratelimit.Item{Key: fmt.Sprintf("{cg}:%d", i), Algorithm: ratelimit.TokenBucket,
			Limit: ratelimit.Limit{Rate: 1_000_000, Per: time.Second, Burst: 1_000_000}, Cost: 1}
	}
	return func(ctx context.Context, s *RedisStore, _ int) (ratelimit.Decision, error) {
		return s.Decide(ctx, batch)
	}
}

// callgrindRun starts redis-server under callgrind, makes decisions
// decisions with decide (as EVALSHA when evalsha is set), each of which
// must admit, stops the server and returns the instructions it executed
// in all.
func callgrindRun(b *testing.B, valgrind string, evalsha bool, decide callgrindDecide, decisions int) int64 {
	out := filepath.Join(b.TempDir(), "callgrind.out")
	srv := redistest.StartStandaloneWith(b, redistest.Options{
		Wrap: []string{valgrind, "--tool=callgrind", "--callgrind-out-file=" + out},
		// serverCron runs hz times per second of wall time, which valgrind
		// stretches by a load-dependent factor: at the default 10 its work
		// moved the count per decision by several thousand from run to run.
		Args:         []string{"--hz", "1", "--dynamic-hz", "no"},
		StartTimeout: 2 * time.Minute, // valgrind starts slowly
	})
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: time.Minute, WriteTimeout: time.Minute, MaxRetries: -1})
	ctx := context.Background()
	if err := client.Ping(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	s := NewRedisStore(client, RedisOptions{Coalesce: CoalesceOptions{Disabled: true}, Logger: slog.New(slog.DiscardHandler)})
	if evalsha {
		s.run.pinEvalsha()
	}
	for i := range decisions {
		if d, err := decide(ctx, s, i); err != nil || !d.Allowed {
			b.Fatalf("decide: %+v, %v", d, err)
		}
	}
	_ = s.Close()
	srv.Shutdown(b, 2*time.Minute)
	f, err := os.Open(out)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "summary: "); ok {
			n, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatalf("no summary line in %s", out)
	return 0
}
