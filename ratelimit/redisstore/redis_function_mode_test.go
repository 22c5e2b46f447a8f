package redisstore_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// TestRedisStoreFunctionsBackAfterFailover: a store on a server without
// functions (as Redis 6) runs EVALSHA, tries FCALL again once a minute
// (the try is refused and sent again as EVALSHA), and after a failover
// to a server with functions (as Redis 7) gets them back at its next try,
// not before, saying so at info level.
func TestRedisStoreFunctionsBackAfterFailover(t *testing.T) {
	old := redistest.StartStandaloneWith(t, redistest.Options{Args: []string{
		"--rename-command", "FCALL", "", "--rename-command", "FUNCTION", ""}})
	upgraded := redistest.StartStandalone(t)
	var target atomic.Value
	target.Store(old.Addr)
	client := redis.NewClient(&redis.Options{Addr: "primary", ContextTimeoutEnabled: true,
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, target.Load().(string))
		}})
	var logs syncBuffer
	s := redisstore.NewRedisStore(client, redisstore.RedisOptions{Timeout: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	defer s.Close()
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	redisstore.SetModeClock(s, clock.Now)
	it := tb(redistest.KeyPrefix(t)+"{up}k", 1, 1000, time.Hour, 1)
	decide := func(what string) {
		t.Helper()
		if d, err := s.Decide(context.Background(), []ratelimit.Item{it}); err != nil || !d.Allowed {
			t.Fatalf("%s: %+v, %v", what, d, err)
		}
	}
	errorStats := func(srv *redistest.Server) string {
		info, _ := srv.MustDo(t, "INFO", "errorstats").(string)
		return info
	}

	decide("on the server without functions")
	if !redisstore.FellBack(s) {
		t.Fatal("the store did not fall back on a server without FCALL")
	}
	clock.Add(redisstore.ReprobeEvery - time.Nanosecond)
	errs0 := errorStats(old)
	_, evalsha0 := scriptCallsByKind(t, old)
	decide("within the minute after the fallback")
	if errs := errorStats(old); errs != errs0 {
		t.Errorf("FCALL tried within the minute after the fallback (errorstats %q, were %q)", errs, errs0)
	}
	clock.Add(time.Nanosecond)
	decide("the first try of FCALL again")
	if errs := errorStats(old); errs == errs0 {
		t.Errorf("no FCALL was tried a minute after the fallback (errorstats %q)", errs)
	}
	// One EVALSHA each, the second after its FCALL was refused.
	if _, evalsha := scriptCallsByKind(t, old); evalsha-evalsha0 != 2 {
		t.Errorf("the server without functions ran %d EVALSHA/EVAL for 2 decisions, want 2", evalsha-evalsha0)
	}

	old.Kill()
	target.Store(upgraded.Addr)
	// The pooled connections to the dead server fail once each.
	for i := 0; ; i++ {
		d, err := s.Decide(context.Background(), []ratelimit.Item{it})
		if err == nil && d.Allowed {
			break
		}
		if i == 10 {
			t.Fatalf("no decision on the new server: %+v, %v", d, err)
		}
	}
	clock.Add(redisstore.ReprobeEvery - time.Nanosecond)
	decide("within the minute after the last try")
	if fcall, evalsha := scriptCallsByKind(t, upgraded); fcall != 0 || evalsha == 0 {
		t.Errorf("before the next try: %d FCALL and %d EVALSHA/EVAL, want EVALSHA only", fcall, evalsha)
	}
	_, evalsha0 = scriptCallsByKind(t, upgraded)
	clock.Add(time.Nanosecond)
	decide("the next try of FCALL")
	decide("after the try")
	// The try finds no function, loads the library and calls again.
	if fcall, evalsha := scriptCallsByKind(t, upgraded); fcall != 3 || evalsha != evalsha0 {
		t.Errorf("after the try: %d FCALL and %d new EVALSHA/EVAL, want 3 and 0", fcall, evalsha-evalsha0)
	}
	if redisstore.FellBack(s) {
		t.Error("the store still sends EVALSHA")
	}
	out := logs.String()
	if strings.Count(out, "level=WARN") != 1 || strings.Count(out, "level=INFO") != 1 || !strings.Contains(out, "available again") {
		t.Errorf("log %q, want one warn line for the fallback and one info line for the return", out)
	}
}

// TestRedisStoreKeepsFunctionsThroughMisconf: FUNCTION LOAD refused for
// a passing reason (here MISCONF: the server cannot persist, so it takes
// no writes) fails the decisions as any store error does, without giving
// functions up: once the server takes writes again, decisions are FCALLs.
func TestRedisStoreKeepsFunctionsThroughMisconf(t *testing.T) {
	srv := redistest.StartStandalone(t)
	var logs syncBuffer
	s := redisstore.NewRedisStore(redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{srv.Addr}}),
		redisstore.RedisOptions{Timeout: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	defer s.Close()
	// A clock that never reaches a try of FCALL after a fallback.
	redisstore.SetModeClock(s, storetest.NewClock(time.Unix(1_700_000_000, 0)).Now)
	it := tb(redistest.KeyPrefix(t)+"{misconf}k", 1, 100, time.Hour, 1)

	restore := srv.FailPersistence(t)
	_, err := s.Decide(context.Background(), []ratelimit.Item{it})
	if !errors.Is(err, ratelimit.ErrUnavailable) || !strings.Contains(err.Error(), "MISCONF") {
		t.Fatalf("decision while the server takes no writes: %v, want ErrUnavailable naming MISCONF", err)
	}
	restore()
	if d, err := s.Decide(context.Background(), []ratelimit.Item{it}); err != nil || !d.Allowed {
		t.Fatalf("decision once the server takes writes: %+v, %v", d, err)
	}
	// Each decision's FCALL finds no function and loads the library; the
	// second one's load succeeds, and its FCALL is sent again.
	if fcall, evalsha := scriptCallsByKind(t, srv); fcall != 3 || evalsha != 0 {
		t.Errorf("server ran %d FCALL and %d EVALSHA/EVAL, want 3 and 0", fcall, evalsha)
	}
	if redisstore.FellBack(s) || strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("the store gave functions up (log %q)", logs.String())
	}
}
