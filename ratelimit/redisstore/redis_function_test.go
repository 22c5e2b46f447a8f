package redisstore_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// scriptCallsByKind returns the FCALL and the EVALSHA/EVAL calls the server
// has run (INFO commandstats).
func scriptCallsByKind(t testing.TB, srv *redistest.Server) (fcall, evalsha int64) {
	t.Helper()
	stats := commandStats(t, srv)
	return stats["cmdstat_fcall"].calls, stats["cmdstat_evalsha"].calls + stats["cmdstat_eval"].calls
}

// libraries returns the names of the function libraries loaded on srv.
func libraries(t testing.TB, srv *redistest.Server) []string {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	libs, err := c.FunctionList(context.Background(), redis.FunctionListQuery{}).Result()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range libs {
		names = append(names, l.Name)
	}
	return names
}

// TestRedisStoreRunsAsFunction: on Redis 7 decisions are FCALLs of a
// library named after the code's digest, loaded by the first decision;
// the store says so once, at info level.
func TestRedisStoreRunsAsFunction(t *testing.T) {
	srv := redistest.StartStandalone(t)
	var logs syncBuffer
	s := redisstore.NewRedisStore(redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{srv.Addr}}),
		redisstore.RedisOptions{Timeout: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	defer s.Close()
	it := tb("{fn}k", 1, 3, time.Hour, 1)
	for i, want := range []bool{true, true, true, false} {
		d, err := s.Decide(context.Background(), []ratelimit.Item{it})
		if err != nil || d.Allowed != want {
			t.Fatalf("decision %d: %+v, %v; want allowed=%v", i, d, err, want)
		}
	}
	fcall, evalsha := scriptCallsByKind(t, srv)
	// The first FCALL finds no function, loads it and is sent again.
	if fcall != 5 || evalsha != 0 {
		t.Errorf("server ran %d FCALL and %d EVALSHA/EVAL, want 5 and 0", fcall, evalsha)
	}
	libs := libraries(t, srv)
	if len(libs) != 1 || !strings.HasPrefix(libs[0], "quotagate_") || len(libs[0]) != len("quotagate_")+12 {
		t.Errorf("libraries %v, want one quotagate_<12 hex digits>", libs)
	}
	if out := logs.String(); strings.Count(out, "level=") != 1 || !strings.Contains(out, "level=INFO") || !strings.Contains(out, "library="+libs[0]) {
		t.Errorf("log %q, want one info line naming the library", out)
	}
}

// TestRedisStoreConformanceFunctionFallback runs the conformance suite as
// an ACL user that may not use functions: without FCALL, and with FCALL
// but without FUNCTION LOAD. The store falls back to EVALSHA, says so once
// at warn level, and decides as it does with functions.
func TestRedisStoreConformanceFunctionFallback(t *testing.T) {
	srv := redistest.StartStandalone(t)
	for _, c := range []struct{ user, deny string }{
		{"nofcall", "-fcall"},
		{"noload", "-function|load"},
	} {
		t.Run(c.user, func(t *testing.T) {
			srv.MustDo(t, "ACL", "SETUSER", c.user, "on", ">pw", "~*", "&*", "+@all", c.deny)
			var logs syncBuffer
			logger := slog.New(slog.NewTextHandler(&logs, nil))
			fcall0, evalsha0 := scriptCallsByKind(t, srv)
			storetest.Run(t, func(t *testing.T, now func() time.Time) ratelimit.Store {
				s := redisstore.NewRedisStore(redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{srv.Addr}, Username: c.user, Password: "pw"}),
					redisstore.RedisOptions{Now: now, Logger: logger})
				t.Cleanup(func() { _ = s.Close() })
				return s
			})
			fcall, evalsha := scriptCallsByKind(t, srv)
			if evalsha-evalsha0 < 100 {
				t.Errorf("the suite ran %d EVALSHA/EVAL calls, want them to carry the decisions", evalsha-evalsha0)
			}
			if c.user == "nofcall" && fcall != fcall0 {
				t.Errorf("the server ran %d FCALL for a user without +fcall", fcall-fcall0)
			}
			if libs := libraries(t, srv); len(libs) != 0 {
				t.Errorf("libraries %v loaded by a user without FUNCTION LOAD", libs)
			}
			out := logs.String()
			if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "EVALSHA") || !strings.Contains(out, "NOPERM") {
				t.Errorf("log %q, want warn lines naming EVALSHA and the refusal", out)
			}
			if strings.Contains(out, "level=INFO") {
				t.Errorf("log %q: a store that fell back announced functions", out)
			}
		})
	}
}

// TestRedisStoreFunctionFlushReloads: after FUNCTION FLUSH (or a restart
// without persistence, or a failover to a node without the library) the
// next decisions load the library again and succeed, concurrent ones
// included, and no decision is lost or counted twice.
func TestRedisStoreFunctionFlushReloads(t *testing.T) {
	srv := redistest.StartStandalone(t)
	for _, co := range []redisstore.CoalesceOptions{{}, {Disabled: true}} {
		t.Run(fmt.Sprintf("coalesce_disabled=%v", co.Disabled), func(t *testing.T) {
			s := redisstore.NewRedisStore(redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{srv.Addr}}),
				redisstore.RedisOptions{Timeout: 10 * time.Second, Coalesce: co})
			defer s.Close()
			prefix := redistest.KeyPrefix(t)
			it := tb(prefix+"{flush}k", 1, 100, time.Hour, 1)
			decide := func() error {
				d, err := s.Decide(context.Background(), []ratelimit.Item{it})
				if err == nil && !d.Allowed {
					err = fmt.Errorf("denied: %+v", d)
				}
				return err
			}
			if err := decide(); err != nil {
				t.Fatal(err)
			}
			srv.MustDo(t, "FUNCTION", "FLUSH")
			if err := decide(); err != nil {
				t.Fatalf("first decision after FUNCTION FLUSH: %v", err)
			}
			srv.MustDo(t, "FUNCTION", "FLUSH")
			const callers = 16
			errs := make(chan error, callers)
			for range callers {
				go func() { errs <- decide() }()
			}
			for range callers {
				if err := <-errs; err != nil {
					t.Errorf("concurrent decision after FUNCTION FLUSH: %v", err)
				}
			}
			peek := it
			peek.Cost, peek.Shadow = 0, true
			d, err := s.Decide(context.Background(), []ratelimit.Item{peek})
			if err != nil {
				t.Fatal(err)
			}
			if want := int64(100 - 2 - callers); d.Results[0].Remaining != want {
				t.Errorf("after %d admissions: remaining %d, want %d", 2+callers, d.Results[0].Remaining, want)
			}
		})
	}
}

// TestRedisStoreClusterFunctionReload: on a Cluster the library is loaded
// on the primary that owns a decision's keys when that primary lacks it
// (here: flushed on one node only).
func TestRedisStoreClusterFunctionReload(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	s := newRedisStore(t, c.Addrs(), nil, 10*time.Second)
	prefix := redistest.KeyPrefix(t)
	items := []ratelimit.Item{tb(prefix+"{a}k", 1, 10, time.Hour, 1), tb(prefix+"{b}k", 1, 10, time.Hour, 1), tb(prefix+"{c}k", 1, 10, time.Hour, 1)}
	decideAll := func() {
		t.Helper()
		for _, it := range items {
			if d, err := s.Decide(context.Background(), []ratelimit.Item{it}); err != nil || !d.Allowed {
				t.Fatalf("%s: %+v, %v", it.Key, d, err)
			}
		}
	}
	decideAll()
	owner := c.PrimaryForKey(items[1].Key)
	if libs := libraries(t, owner); len(libs) != 1 {
		t.Fatalf("owner of %s has libraries %v, want the store's", items[1].Key, libs)
	}
	owner.MustDo(t, "FUNCTION", "FLUSH")
	decideAll()
	if libs := libraries(t, owner); len(libs) != 1 {
		t.Errorf("after FUNCTION FLUSH and a decision: libraries %v, want the store's again", libs)
	}
	fcall, evalsha := scriptCallsByKind(t, owner)
	if fcall == 0 || evalsha != 0 {
		t.Errorf("owner ran %d FCALL and %d EVALSHA/EVAL, want FCALL only", fcall, evalsha)
	}
}

// TestRedisTokenBucketStoredFormat: a token bucket written in the stored
// format (fields a, l, s, p, as every version writes it) is updated in
// place: an admission rewrites only the level and the stamp, with the
// exact integer values, and sets the expiry; a change of per rewrites p.
// Gateways of the previous version read the result as their own.
func TestRedisTokenBucketStoredFormat(t *testing.T) {
	srv := redistest.StartStandalone(t)
	t0 := time.Unix(1_700_000_000, 0)
	clock := storetest.NewClock(t0)
	s := newRedisStore(t, []string{srv.Addr}, clock.Now, 5*time.Second)
	key := redistest.KeyPrefix(t) + "{fmt}tb"
	us := func(d time.Duration) string { return fmt.Sprint(t0.Add(d).UnixMicro()) }
	// As the previous version leaves it: 500 of 1000 tokens at t0.
	srv.MustDo(t, "HSET", key, "a", "1", "l", "500000000", "s", us(0), "p", "1000000")
	srv.MustDo(t, "PEXPIRE", key, "5000")
	hash := func() map[string]string {
		v, _ := srv.MustDo(t, "HGETALL", key).([]any)
		m := map[string]string{}
		for i := 0; i+1 < len(v); i += 2 {
			m[fmt.Sprint(v[i])] = fmt.Sprint(v[i+1])
		}
		return m
	}
	clock.Add(2 * time.Second) // 502 tokens
	if d := mustDecide(t, s, tb(key, 1, 1000, time.Second, 1)); d.Results[0].Remaining != 501 {
		t.Fatalf("remaining %d, want 501", d.Results[0].Remaining)
	}
	want := map[string]string{"a": "1", "l": "501000000", "s": us(2 * time.Second), "p": "1000000"}
	if got := hash(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after an admission: %v, want %v", got, want)
	}
	if ttl, _ := srv.MustDo(t, "PTTL", key).(int64); ttl <= 5000 || ttl > 499_000 {
		t.Errorf("PTTL %d ms, want the 499 s until full, set afresh", ttl)
	}
	// The same bucket per 2 s: the level is rescaled and p rewritten.
	if d := mustDecide(t, s, tb(key, 1, 1000, 2*time.Second, 1)); d.Results[0].Remaining != 500 {
		t.Fatalf("per 2s: remaining %d, want 500", d.Results[0].Remaining)
	}
	want = map[string]string{"a": "1", "l": "1000000000", "s": us(2 * time.Second), "p": "2000000"}
	if got := hash(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after a change of per: %v, want %v", got, want)
	}
}

// TestRedisFunctionParsesManyDistinctLimits: the library remembers parsed
// argument texts between calls in a table it empties at 4096 entries;
// decisions across that many distinct limits stay exact.
func TestRedisFunctionParsesManyDistinctLimits(t *testing.T) {
	srv := redistest.StartStandalone(t)
	s := newRedisStore(t, []string{srv.Addr}, nil, 10*time.Second)
	prefix := redistest.KeyPrefix(t)
	for burst := int64(2); burst < 4400; burst++ {
		d, err := s.Decide(context.Background(), []ratelimit.Item{tb(fmt.Sprintf("%s{many}%d", prefix, burst), 1, burst, time.Hour, 1)})
		if err != nil || !d.Allowed || d.Results[0].Remaining != burst-1 {
			t.Fatalf("burst %d: %+v, %v; want admitted with %d remaining", burst, d, err, burst-1)
		}
	}
}
