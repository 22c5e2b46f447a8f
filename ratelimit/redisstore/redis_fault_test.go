package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

func tb(key string, rate, burst int64, per time.Duration, cost int64) ratelimit.Item {
	return ratelimit.Item{Key: key, Algorithm: ratelimit.TokenBucket, Limit: ratelimit.Limit{Rate: rate, Per: per, Burst: burst}, Cost: cost}
}

func mustDecide(t *testing.T, s ratelimit.Store, items ...ratelimit.Item) ratelimit.Decision {
	t.Helper()
	d, err := s.Decide(context.Background(), items)
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	return d
}

// missAfter bounds how long decideOrMiss waits for a call that should end
// at a deadline of milliseconds: only a machine that cannot run the test
// (or a call that hangs) gets there.
const missAfter = 10 * time.Second

// decideOrMiss runs s.Decide(ctx, items) and returns how long it took and
// its error. A call still running after missAfter fails t as a missed
// deadline (proctest.FatalOverrun; what names the call), apart from a
// wrong answer, which the caller checks.
func decideOrMiss(t *testing.T, ctx context.Context, s ratelimit.Store, items []ratelimit.Item, what string) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := s.Decide(ctx, items)
		done <- err
	}()
	select {
	case err := <-done:
		return time.Since(start), err
	case <-time.After(missAfter):
		proctest.FatalOverrun(t, "%s had not returned after %v", what, missAfter)
		return 0, nil
	}
}

// TestRedisStorePausedTimesOut: on a paused (SIGSTOP) Redis a Decide fails
// with ErrUnavailable wrapping context.DeadlineExceeded at the store's
// timeout, or at the caller's deadline when that is earlier, instead of
// hanging. Nothing is timed: the client's socket timeouts are a minute,
// and the store whose caller's deadline must win has a timeout of an
// hour, so a call that ends with DeadlineExceeded at all was ended by the
// deadline under test. One that has not ended after missAfter is a missed
// deadline.
func TestRedisStorePausedTimesOut(t *testing.T) {
	srv := redistest.StartStandalone(t)
	const timeout = 50 * time.Millisecond
	slowSockets := redisstore.RedisClientOptions{Addrs: []string{srv.Addr}, ReadTimeout: time.Minute, WriteTimeout: time.Minute}
	s, _ := countedClientStore(t, slowSockets, redisstore.RedisOptions{Timeout: timeout})
	patient, _ := countedClientStore(t, slowSockets, redisstore.RedisOptions{Timeout: time.Hour})
	it := tb(redistest.KeyPrefix(t)+"{p}k", 10, 10, time.Second, 1)
	storetest.WarmUp(t, s, []ratelimit.Item{it})
	storetest.WarmUp(t, patient, []ratelimit.Item{it})

	srv.Pause()
	defer srv.Resume()
	for i := range 3 {
		took, err := decideOrMiss(t, context.Background(), s, []ratelimit.Item{it},
			fmt.Sprintf("call %d on a paused Redis, store timeout %v,", i, timeout))
		if !errors.Is(err, ratelimit.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call %d on a paused Redis: err = %v, want ErrUnavailable wrapping DeadlineExceeded", i, err)
		}
		t.Logf("call %d: %v after %v", i, err, took)
	}
	// A caller's earlier deadline wins over the store's timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	took, err := decideOrMiss(t, ctx, patient, []ratelimit.Item{it},
		"a call with a 10ms deadline on a paused Redis, store timeout 1h,")
	if !errors.Is(err, ratelimit.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("short caller deadline: err = %v, want ErrUnavailable wrapping DeadlineExceeded", err)
	}
	t.Logf("10ms caller deadline: %v after %v", err, took)

	srv.Resume()
	storetest.WarmUp(t, s, []ratelimit.Item{it})
}

func TestRedisStoreKilledAndRestarted(t *testing.T) {
	srv := redistest.StartStandalone(t)
	s := newRedisStore(t, []string{srv.Addr}, nil, 200*time.Millisecond)
	it := tb("{r}k", 1, 5, time.Hour, 5)
	if d := mustDecide(t, s, it); !d.Allowed {
		t.Fatalf("first drain denied: %+v", d)
	}
	if d := mustDecide(t, s, it); d.Allowed {
		t.Fatalf("second drain admitted: %+v", d)
	}

	srv.Kill()
	for i := range 3 {
		_, err := decideOrMiss(t, context.Background(), s, []ratelimit.Item{it},
			fmt.Sprintf("call %d on a killed Redis, store timeout 200ms,", i))
		if !errors.Is(err, ratelimit.ErrUnavailable) {
			t.Fatalf("call %d on a killed Redis: err = %v, want ErrUnavailable", i, err)
		}
	}

	// Restarted empty (no state, no scripts): the same store recovers. A
	// pooled connection to the dead process may fail one call.
	srv.Restart()
	var d ratelimit.Decision
	var err error
	failures := 0
	for range 5 {
		if d, err = s.Decide(context.Background(), []ratelimit.Item{it}); err == nil {
			break
		}
		failures++
	}
	if err != nil {
		t.Fatalf("store did not recover after a restart: %v", err)
	}
	if failures > 1 {
		t.Errorf("%d calls failed after the restart, want at most 1", failures)
	}
	if !d.Allowed || d.Results[0].Remaining != 0 {
		t.Fatalf("empty Redis: got %+v, want the full bucket drained", d)
	}
}

func TestRedisStoreScriptFlush(t *testing.T) {
	srv := redistest.StartStandalone(t)
	s := newRedisStore(t, []string{srv.Addr}, nil, time.Second)
	prefix := redistest.KeyPrefix(t)
	it := tb(prefix+"{f}k", 1000, 1000, time.Second, 1)
	mustDecide(t, s, it)
	srv.MustDo(t, "SCRIPT", "FLUSH")
	mustDecide(t, s, it)

	// During traffic, including denials that refund and evaluate later
	// groups in a pipeline.
	stop := make(chan struct{})
	var flushes atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := srv.Do("SCRIPT", "FLUSH"); err == nil {
				flushes.Add(1)
			}
			time.Sleep(time.Millisecond)
		}
	})
	var calls, denials atomic.Int64
	errs := make(chan error, 8)
	var workers sync.WaitGroup
	for w := range 8 {
		workers.Go(func() {
			for i := range 150 {
				items := []ratelimit.Item{
					tb(prefix+"{route}r", 1_000_000, 1_000_000, time.Second, 1),
					tb(fmt.Sprintf("%s{tenant%d}t", prefix, w), 1, 20, time.Hour, 1),
					tb(prefix+"{other}o", 1_000_000, 1_000_000, time.Second, 1),
				}
				if i%3 == 0 {
					items = items[1:2]
				}
				d, err := s.Decide(context.Background(), items)
				if err != nil {
					errs <- err
					return
				}
				calls.Add(1)
				if !d.Allowed {
					denials.Add(1)
				}
			}
		})
	}
	workers.Wait()
	close(stop)
	wg.Wait()
	close(errs)
	// A decision that ran out of its 1 s deadline on a starved machine is a
	// missed deadline, reported; any other error (a NOSCRIPT that leaked
	// out, a malformed reply) is a wrong answer and fails.
	missed := 0
	for err := range errs {
		if isDeadline(err) {
			missed++
			t.Logf("missed deadline: Decide during SCRIPT FLUSH: %v", err)
			continue
		}
		t.Errorf("Decide during SCRIPT FLUSH: %v", err)
	}
	if missed == 8 {
		t.Fatalf("missed deadline: every worker's decisions ran out of time; nothing was checked")
	}
	t.Logf("%d calls (%d denied) during %d flushes", calls.Load(), denials.Load(), flushes.Load())
	if flushes.Load() < 10 || denials.Load() == 0 {
		t.Fatalf("test did not exercise what it should: %d flushes, %d denials", flushes.Load(), denials.Load())
	}
}

// TestRedisStoreExactUnderConcurrency: 64 goroutines over 8 clients (8
// connection pools) on a bucket of 100 with the Redis server clock admit
// exactly 100.
func TestRedisStoreExactUnderConcurrency(t *testing.T) {
	srv := redistest.StartStandalone(t)
	stores := make([]*redisstore.RedisStore, 8)
	for i := range stores {
		stores[i] = newRedisStore(t, []string{srv.Addr}, nil, 2*time.Second)
	}
	// 100 tokens, one more per hour: no refill during the test.
	it := tb(redistest.KeyPrefix(t)+"{hot}k", 1, 100, time.Hour, 1)
	var admitted, denied atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 64 {
		s := stores[g%len(stores)]
		wg.Go(func() {
			for range 5 {
				d, err := s.Decide(context.Background(), []ratelimit.Item{it})
				if err != nil {
					errs <- err
					return
				}
				if d.Allowed {
					admitted.Add(1)
				} else {
					denied.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Decide: %v", err)
	}
	if admitted.Load() != 100 || denied.Load() != 220 {
		t.Fatalf("admitted %d, denied %d; want exactly 100 and 220", admitted.Load(), denied.Load())
	}
}

// TestRedisStoreKeysExpire checks that every key written has a TTL no
// longer than its state needs, and that the keys the gateway writes carry a
// hash tag.
func TestRedisStoreKeysExpire(t *testing.T) {
	srv := redistest.StartStandalone(t)
	s := newRedisStore(t, []string{srv.Addr}, nil, time.Second)
	prefix := redistest.KeyPrefix(t)
	// A cost of 1 from full: the TTL must cover the time to full again.
	cases := []struct {
		it     ratelimit.Item
		maxTTL time.Duration
	}{
		{tb(prefix+"{acme}:tb", 10, 20, time.Minute, 1), 6 * time.Second},
		{ratelimit.Item{Key: prefix + "{acme}:fw", Algorithm: ratelimit.FixedWindow, Limit: ratelimit.Limit{Rate: 5, Per: time.Minute}, Cost: 1}, time.Minute},
		{ratelimit.Item{Key: prefix + "{acme}:sw", Algorithm: ratelimit.SlidingWindow, Limit: ratelimit.Limit{Rate: 5, Per: time.Minute}, Cost: 1}, 2 * time.Minute},
		{ratelimit.Item{Key: prefix + "{acme}:sl", Algorithm: ratelimit.SlidingLog, Limit: ratelimit.Limit{Rate: 5, Per: time.Minute}, Cost: 1}, time.Minute},
		// Its refill takes 3s: long enough that a loaded machine reads the
		// key before it expires, short enough to tell from a fixed TTL.
		{tb(prefix+"{route:transfers}:tb", 100, 100, 100*time.Second, 3), 3 * time.Second},
	}
	items := make([]ratelimit.Item, len(cases))
	for i, c := range cases {
		items[i] = c.it
	}
	if d := mustDecide(t, s, items...); !d.Allowed {
		t.Fatalf("denied: %+v", d)
	}
	keys, ok := srv.MustDo(t, "KEYS", prefix+"*").([]any)
	if !ok || len(keys) != len(cases) {
		t.Fatalf("KEYS %s* = %v, want %d keys", prefix, keys, len(cases))
	}
	for _, c := range cases {
		if redistest.HashTag(c.it.Key) == c.it.Key {
			t.Errorf("%s has no hash tag", c.it.Key)
		}
		pttl, _ := srv.MustDo(t, "PTTL", c.it.Key).(int64)
		if pttl <= 0 || time.Duration(pttl)*time.Millisecond > c.maxTTL {
			t.Errorf("%s: PTTL %d ms, want in (0, %v]", c.it.Key, pttl, c.maxTTL)
		}
		if typ := srv.MustDo(t, "TYPE", c.it.Key); typ != "hash" {
			t.Errorf("%s is a %v, want one hash per key", c.it.Key, typ)
		}
	}
	// A peek (cost 0) writes nothing.
	peek := tb(prefix+"{acme}:peek", 1, 1, time.Second, 0)
	mustDecide(t, s, peek)
	if n := srv.MustDo(t, "EXISTS", peek.Key); n != int64(0) {
		t.Errorf("a peek created its key")
	}
}

// TestRedisStoreClusterSlots: one tenant's keys share a slot and a primary;
// different tenants spread over all primaries.
func TestRedisStoreClusterSlots(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	s := newRedisStore(t, c.Addrs(), nil, time.Second)
	prefix := redistest.KeyPrefix(t)
	perNode := map[string]int{}
	for i := range 30 {
		tag := fmt.Sprintf("{tenant-%d}", i)
		items := []ratelimit.Item{
			// Limits that refill over an hour, so that each key outlives
			// the EXISTS check below however slow the machine is.
			tb(prefix+tag+":tenant", 10, 10, time.Hour, 1),
			tb(prefix+tag+":route:transfers", 10, 10, time.Hour, 1),
			{Key: prefix + tag + ":log", Algorithm: ratelimit.SlidingLog, Limit: ratelimit.Limit{Rate: 5, Per: time.Hour}, Cost: 1},
		}
		if d := mustDecide(t, s, items...); !d.Allowed {
			t.Fatalf("tenant %d denied: %+v", i, d)
		}
		owner := c.PrimaryForKey(items[0].Key)
		for _, it := range items {
			if redistest.Slot(it.Key) != redistest.Slot(items[0].Key) {
				t.Fatalf("%s and %s are in different slots", it.Key, items[0].Key)
			}
			if n, err := owner.Do("EXISTS", it.Key); err != nil || n != int64(1) {
				t.Fatalf("%s not on its slot's primary %s: %v %v", it.Key, owner.Addr, n, err)
			}
		}
		perNode[owner.Addr]++
	}
	for _, n := range c.Nodes() {
		if perNode[n.Addr] == 0 {
			t.Errorf("no tenant on primary %s: %v", n.Addr, perNode)
		}
	}
}

// TestRedisStoreGroupsBound checks the documented treatment of a batch
// that spans hash tags: a shared (route) bucket is refunded when the
// tenant's group denies, and the tenant's bucket is untouched when the
// route denies.
func TestRedisStoreGroupsBound(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		testGroupsBound(t, []string{redistest.StartStandalone(t).Addr})
	})
	t.Run("cluster", func(t *testing.T) {
		testGroupsBound(t, redistest.StartCluster(t, 3).Addrs())
	})
}

func testGroupsBound(t *testing.T, addrs []string) {
	var failPipelines atomic.Bool
	client := redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: addrs})
	client.AddHook(pipelineFailer{fail: &failPipelines})
	s := redisstore.NewRedisStore(client, redisstore.RedisOptions{Timeout: time.Second})
	t.Cleanup(func() { _ = s.Close() })
	prefix := redistest.KeyPrefix(t)
	route := tb(prefix+"{route:transfers}", 1, 10, time.Hour, 1)
	tenant := tb(prefix+"{acme}:tenant", 1, 2, time.Hour, 1)
	peek := func(it ratelimit.Item) int64 {
		it.Cost = 0
		return mustDecide(t, s, it).Results[0].Remaining
	}

	// Two admitted, then the tenant denies: the route gets its unit back,
	// and the Result reports it as not taken.
	for range 2 {
		if d := mustDecide(t, s, route, tenant); !d.Allowed {
			t.Fatalf("admission denied: %+v", d)
		}
	}
	for i := range 5 {
		d := mustDecide(t, s, route, tenant)
		if d.Allowed || !d.Results[0].Allowed || d.Results[1].Allowed {
			t.Fatalf("denial %d: %+v", i, d)
		}
		if d.Results[0].Remaining != 8 {
			t.Fatalf("denial %d: route reported %d remaining, want 8 (its unit not taken)", i, d.Results[0].Remaining)
		}
	}
	if got := peek(route); got != 8 {
		t.Fatalf("route has %d after 5 tenant denials, want 8: refunds lost", got)
	}

	// The route denies first: the tenant's group is evaluated, not charged.
	other := tb(prefix+"{globex}:tenant", 1, 5, time.Hour, 1)
	mustDecide(t, s, tb(route.Key, 1, 10, time.Hour, 8))
	for range 3 {
		d := mustDecide(t, s, route, other)
		if d.Allowed || d.Results[0].Allowed || !d.Results[1].Allowed || d.Results[1].Remaining != 5 {
			t.Fatalf("route denial: %+v", d)
		}
	}
	if got := peek(other); got != 5 {
		t.Fatalf("tenant charged by route denials: %d remaining, want 5", got)
	}

	// A refund that fails loses exactly its cost, and the decision stands.
	fresh := tb(prefix+"{route:refunds}", 1, 10, time.Hour, 1)
	failPipelines.Store(true)
	d := mustDecide(t, s, fresh, tenant)
	failPipelines.Store(false)
	if d.Allowed {
		t.Fatalf("denied tenant admitted: %+v", d)
	}
	if got := peek(fresh); got != 9 {
		t.Fatalf("after a failed refund the route has %d, want 9 (one unit lost, no more)", got)
	}
}

// pipelineFailer fails the refund calls (script mode "r") of every
// pipeline while fail is set, as a network failure after the decision
// would; the other calls of the pipeline go through.
type pipelineFailer struct{ fail *atomic.Bool }

func (h pipelineFailer) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h pipelineFailer) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h pipelineFailer) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !h.fail.Load() {
			return next(ctx, cmds)
		}
		err := errors.New("injected pipeline failure")
		var rest []redis.Cmder
		for _, c := range cmds {
			if isRefund(c) {
				c.SetErr(err)
			} else {
				rest = append(rest, c)
			}
		}
		if len(rest) == 0 {
			return err
		}
		return next(ctx, rest)
	}
}

// isRefund reports whether c is a script call in refund mode: FCALL,
// EVALSHA or EVAL, function or script, numkeys, keys..., then the mode.
func isRefund(c redis.Cmder) bool {
	args := c.Args()
	if len(args) < 3 {
		return false
	}
	if name, _ := args[0].(string); name != "fcall" && name != "evalsha" && name != "eval" {
		return false
	}
	n, ok := args[2].(int)
	return ok && len(args) > 3+n && args[3+n] == "r"
}

// TestRedisStoreMalformedKeyType: a key holding another Redis type is an
// error wrapping ErrUnavailable, not a panic or a silent decision.
func TestRedisStoreMalformedKeyType(t *testing.T) {
	srv := redistest.StartStandalone(t)
	s := newRedisStore(t, []string{srv.Addr}, nil, time.Second)
	srv.MustDo(t, "SET", "{x}str", "v")
	_, err := s.Decide(context.Background(), []ratelimit.Item{tb("{x}str", 1, 1, time.Second, 1)})
	if !errors.Is(err, ratelimit.ErrUnavailable) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("err = %v, want ErrUnavailable with WRONGTYPE", err)
	}
}

// isDeadline reports whether err is a decision that ran out of time: the
// context's deadline, or a socket timeout that the deadline set.
func isDeadline(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
