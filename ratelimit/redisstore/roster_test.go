package redisstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/internal/testclock"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/stack"
)

// rosterFleet returns a stack.Fleet registering in the roster key on its own
// client for addrs, with no background heartbeat: the test calls Beat.
// The roster reads clock; floor is the stack.Fleet's floor.
func rosterFleet(t *testing.T, addrs []string, key string, clock *testclock.Clock, ttl time.Duration, floor int) *stack.Fleet {
	t.Helper()
	client := redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: addrs})
	t.Cleanup(func() { _ = client.Close() })
	f := stack.NewFleet(stack.FleetOptions{
		Roster: redisstore.NewRedisRoster(client, redisstore.RosterOptions{Key: key, Now: clock.Now}),
		TTL:    ttl, Every: -1, Floor: floor, Timeout: 2 * time.Second,
	})
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// beat sends f's heartbeat and returns its size after it.
func beat(t *testing.T, f *stack.Fleet) int64 {
	t.Helper()
	if err := f.Beat(context.Background()); err != nil {
		t.Fatalf("Beat %s: %v", f.ID(), err)
	}
	return f.Size()
}

// TestFleetCountsLiveInstances: two instances registered count 2; one that
// stops heartbeating drops out once its TTL has passed on the roster's
// clock, not before; one that leaves drops out at once; the floor holds
// whatever the count; with the server (the Cluster primary) holding the
// roster killed, the last count known stays. Standalone and a 3-primary
// Cluster, the roster in one slot of its own.
func TestFleetCountsLiveInstances(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(t *testing.T, key string) (addrs []string, kill func())
	}{
		{"standalone", func(t *testing.T, _ string) ([]string, func()) {
			srv := redistest.StartStandalone(t)
			return []string{srv.Addr}, srv.Kill
		}},
		{"cluster", func(t *testing.T, key string) ([]string, func()) {
			c := redistest.StartCluster(t, 3)
			return c.Addrs(), c.PrimaryForKey(key).Kill
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := redisstore.RosterKey(redistest.KeyPrefix(t) + "qg")
			addrs, kill := tc.start(t, key)
			if tag := redistest.HashTag(key); tag != "f:fleet" {
				t.Fatalf("roster key %q has hash tag %q, want f:fleet", key, tag)
			}
			const ttl = 30 * time.Second
			clock := testclock.New(time.Unix(1_800_000_000, 0))
			a := rosterFleet(t, addrs, key, clock, ttl, 1)
			b := rosterFleet(t, addrs, key, clock, ttl, 1)
			floored := rosterFleet(t, addrs, key, clock, ttl, 5)

			if n, known := a.Live(); n != 1 || known || a.Size() != 1 {
				t.Fatalf("before a heartbeat: live %d known %v size %d, want 1 false 1", n, known, a.Size())
			}
			if got := beat(t, a); got != 1 {
				t.Fatalf("a alone: size %d, want 1", got)
			}
			if got := beat(t, b); got != 2 {
				t.Fatalf("a and b: b's size %d, want 2", got)
			}
			if got := beat(t, a); got != 2 {
				t.Fatalf("a and b: a's size %d, want 2", got)
			}

			// b stops; a keeps beating every ttl/3. Until b's TTL has run
			// out on the roster's clock, b counts.
			for range 2 {
				clock.Add(ttl / 3)
				if got := beat(t, a); got != 2 {
					t.Fatalf("%v after b's last heartbeat: a's size %d, want 2", clock.Now().Sub(time.Unix(1_800_000_000, 0)), got)
				}
			}
			clock.Add(ttl/3 + time.Millisecond)
			if got := beat(t, a); got != 1 {
				t.Fatalf("past b's TTL: a's size %d, want 1", got)
			}

			// b comes back, then leaves: a counts it out at its next
			// heartbeat, without waiting for a TTL.
			if got := beat(t, b); got != 2 {
				t.Fatalf("b back: size %d, want 2", got)
			}
			if err := b.Close(); err != nil {
				t.Fatalf("b.Close: %v", err)
			}
			if got := beat(t, a); got != 1 {
				t.Fatalf("b left: a's size %d, want 1", got)
			}

			// The floor: 2 live (a and floored) but never below 5.
			if got := beat(t, floored); got != 5 {
				t.Fatalf("floor 5 with 2 live: size %d, want 5", got)
			}
			if n, known := floored.Live(); n != 2 || !known {
				t.Fatalf("floored live = %d, %v; want 2, true", n, known)
			}

			// The roster's server dies: heartbeats fail, a keeps its last
			// count.
			if got := beat(t, a); got != 2 {
				t.Fatalf("a with floored: size %d, want 2", got)
			}
			kill()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := a.Beat(ctx); !errors.Is(err, ratelimit.ErrUnavailable) {
				t.Fatalf("Beat with the roster's server down: %v, want ErrUnavailable", err)
			}
			if got := a.Size(); got != 2 {
				t.Fatalf("during the outage: size %d, want the last count 2", got)
			}
		})
	}
}

// TestFleetKeepsLastCountDuringOutage: while Redis is down a heartbeat
// fails (ErrUnavailable) and the last count known stays, so the shares
// do not jump to the floor during an outage; once Redis is back, the count
// is fresh again.
func TestFleetKeepsLastCountDuringOutage(t *testing.T) {
	srv := redistest.StartStandalone(t)
	key := redisstore.RosterKey("qg")
	clock := testclock.New(time.Unix(1_800_000_000, 0))
	a := rosterFleet(t, []string{srv.Addr}, key, clock, time.Minute, 1)
	b := rosterFleet(t, []string{srv.Addr}, key, clock, time.Minute, 1)
	c := rosterFleet(t, []string{srv.Addr}, key, clock, time.Minute, 1)
	beat(t, a)
	beat(t, b)
	if got := beat(t, c); got != 3 {
		t.Fatalf("three instances: size %d, want 3", got)
	}

	srv.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Beat(ctx); !errors.Is(err, ratelimit.ErrUnavailable) {
		t.Fatalf("Beat with Redis down: %v, want ErrUnavailable", err)
	}
	if n, known := c.Live(); c.Size() != 3 || n != 3 || !known {
		t.Fatalf("during the outage: size %d live %d known %v, want the last count 3", c.Size(), n, known)
	}

	// Redis restarts empty (no persistence): the instances register again.
	srv.Restart()
	if got := beat(t, c); got != 1 {
		t.Fatalf("after restart, c alone registered: size %d, want 1", got)
	}
	beat(t, a)
	if got := beat(t, c); got != 2 {
		t.Fatalf("after restart, a and c: size %d, want 2", got)
	}
}

// TestRosterKeyExpires: the roster key carries an expiry of at least the
// TTL, so a fleet that is gone leaves nothing in Redis.
func TestRosterKeyExpires(t *testing.T) {
	srv := redistest.StartStandalone(t)
	key := redisstore.RosterKey("qg")
	client := redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{srv.Addr}})
	defer client.Close()
	r := redisstore.NewRedisRoster(client, redisstore.RosterOptions{Key: key})
	ctx := context.Background()
	if n, err := r.Heartbeat(ctx, "a", 10*time.Second); err != nil || n != 1 {
		t.Fatalf("Heartbeat: %d, %v", n, err)
	}
	if n, err := r.Heartbeat(ctx, "b", time.Minute); err != nil || n != 2 {
		t.Fatalf("Heartbeat: %d, %v", n, err)
	}
	// A shorter TTL must not shorten the key below the longer one's.
	if n, err := r.Heartbeat(ctx, "a", 10*time.Second); err != nil || n != 2 {
		t.Fatalf("Heartbeat: %d, %v", n, err)
	}
	pttl, err := client.PTTL(ctx, key).Result()
	if err != nil || pttl <= 50*time.Second || pttl > time.Minute {
		t.Fatalf("PTTL = %v, %v; want in (50s, 1m]", pttl, err)
	}
	if _, err := r.Heartbeat(ctx, "a", 0); !errors.Is(err, ratelimit.ErrInvalid) {
		t.Fatalf("Heartbeat with TTL 0: %v, want ErrInvalid", err)
	}
}

// TestOpenJoinsAndLeavesTheFleet: two stacks opened on one Redis count
// each other through their background heartbeats (on the Redis clock);
// closing one takes it out of the other's count within a heartbeat. With
// FleetStatic the size is store.fleet_size and nothing registers.
func TestOpenJoinsAndLeavesTheFleet(t *testing.T) {
	srv := redistest.StartStandalone(t)
	prefix := redistest.KeyPrefix(t) + "qg"
	open := func(static bool) *stack.Stack {
		s := redisstore.Open(redisstore.Config{Addrs: []string{srv.Addr}, Timeout: time.Second, FleetSize: 1,
			FleetTTL: 600 * time.Millisecond, FleetStatic: static, KeyPrefix: prefix})
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	// waitSize polls s until its size is want; the heartbeats run on real
	// time, so a slow machine shows as a missed deadline, not a wrong count.
	waitSize := func(s *stack.Stack, want int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for s.FleetSize() != want {
			if time.Now().After(deadline) {
				t.Fatalf("missed deadline: fleet size still %d after 10s, want %d", s.FleetSize(), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	a, b := open(false), open(false)
	waitSize(a, 2)
	waitSize(b, 2)
	static := open(true)
	if got := static.FleetSize(); got != 1 {
		t.Fatalf("static fleet size %d, want 1", got)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	waitSize(a, 1)
	members, err := srv.Do("ZCARD", redisstore.RosterKey(prefix))
	if err != nil || members != int64(1) {
		t.Fatalf("ZCARD roster = %v, %v; want 1 (the static stack never registers)", members, err)
	}
}

// heartbeatCalls is a redis.Hook that counts the script calls a client
// attempts (a heartbeat is one, or two when the script is not cached),
// whether or not a server answers them.
type heartbeatCalls struct{ n atomic.Int64 }

func (h *heartbeatCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *heartbeatCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *heartbeatCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestFleetHeartbeatsFollowBreaker: heartbeats go through the store's
// circuit breaker. With Redis stopped and the breaker opened by failed
// decisions, heartbeats fail at once without a call to Redis and the
// last count known stays; once the cooldown has passed one heartbeat is
// the probe (it fails while Redis is down, and the next ones skip again);
// with Redis back, the probe succeeds, the breaker closes, and heartbeats
// follow the fleet again. Attempts are counted on the client, time is a
// fake clock.
func TestFleetHeartbeatsFollowBreaker(t *testing.T) {
	srv := redistest.StartStandalone(t)
	const cooldown = 5 * time.Second
	clock := testclock.New(time.Unix(1_800_000_000, 0))
	calls := &heartbeatCalls{}
	client := redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{srv.Addr}})
	t.Cleanup(func() { _ = client.Close() })
	client.AddHook(calls)
	store := redisstore.NewRedisStore(client, redisstore.RedisOptions{Now: clock.Now, Timeout: time.Second})
	breaker := stack.NewBreaker(store, stack.BreakerOptions{Failures: 2, Cooldown: cooldown, Now: clock.Now})
	key := redisstore.RosterKey(redistest.KeyPrefix(t) + "qg")
	roster := stack.BreakerRoster(redisstore.NewRedisRoster(client, redisstore.RosterOptions{Key: key, Now: clock.Now}), breaker, key)
	f := stack.NewFleet(stack.FleetOptions{Roster: roster, TTL: time.Minute, Every: -1, Timeout: 2 * time.Second})
	t.Cleanup(func() { _ = f.Close() })
	other := rosterFleet(t, []string{srv.Addr}, key, clock, time.Minute, 1)
	beat(t, other)
	if got := beat(t, f); got != 2 {
		t.Fatalf("two instances: size %d, want 2", got)
	}

	srv.Kill()
	ctx := context.Background()
	it := tb(redistest.KeyPrefix(t)+"{t}k", 1, 10, time.Hour, 1)
	for i := range 2 {
		if _, err := breaker.Decide(ctx, []ratelimit.Item{it}); !errors.Is(err, ratelimit.ErrUnavailable) || errors.Is(err, ratelimit.ErrBreakerOpen) {
			t.Fatalf("decision %d with Redis stopped: %v, want a store failure", i, err)
		}
	}
	if st := breaker.State(); st != stack.BreakerOpen {
		t.Fatalf("breaker %v after 2 failures, want open", st)
	}
	before := calls.n.Load()
	for i := range 5 {
		if err := f.Beat(ctx); !errors.Is(err, ratelimit.ErrBreakerOpen) || !errors.Is(err, ratelimit.ErrUnavailable) {
			t.Fatalf("heartbeat %d with the breaker open: %v, want ErrBreakerOpen", i, err)
		}
	}
	if n := calls.n.Load() - before; n != 0 {
		t.Fatalf("%d heartbeat calls sent to a store the breaker knows is down, want 0", n)
	}
	if n, known := f.Live(); f.Size() != 2 || n != 2 || !known {
		t.Fatalf("during the outage: size %d live %d known %v, want the last count 2", f.Size(), n, known)
	}

	// The cooldown passes with Redis still down: one heartbeat probes and
	// fails, which opens the breaker again.
	clock.Add(cooldown)
	before = calls.n.Load()
	if err := f.Beat(ctx); !errors.Is(err, ratelimit.ErrUnavailable) || errors.Is(err, ratelimit.ErrBreakerOpen) {
		t.Fatalf("the probing heartbeat: %v, want a store failure", err)
	}
	if err := f.Beat(ctx); !errors.Is(err, ratelimit.ErrBreakerOpen) {
		t.Fatalf("the heartbeat after a failed probe: %v, want ErrBreakerOpen", err)
	}
	if n := calls.n.Load() - before; n != 1 {
		t.Fatalf("%d heartbeat calls around a failed probe, want 1 (the probe)", n)
	}

	// Redis is back (empty). After the cooldown a heartbeat probes; a
	// pooled connection to the dead process may fail one probe, which
	// costs one more cooldown.
	srv.Restart()
	var err error
	for range 3 {
		clock.Add(cooldown)
		if err = f.Beat(ctx); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("heartbeats did not resume once Redis was back: %v", err)
	}
	if st := breaker.State(); st != stack.BreakerClosed {
		t.Fatalf("breaker %v after a successful probe, want closed", st)
	}
	beat(t, other)
	before = calls.n.Load()
	if got := beat(t, f); got != 2 {
		t.Fatalf("after the outage: size %d, want 2 (both registered again)", got)
	}
	if calls.n.Load() == before {
		t.Fatal("a heartbeat with the breaker closed sent nothing")
	}
}
