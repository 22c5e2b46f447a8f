package redisstore_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// pipelineCounter counts the pipelines of script calls a client sends and
// the calls in them (a new connection's setup pipeline is left out).
type pipelineCounter struct {
	pipelines, cmds atomic.Int64
	mu              sync.Mutex
	sizes           []int
}

func (h *pipelineCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h *pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || cmds[0].Name() != "fcall" && cmds[0].Name() != "evalsha" {
			return next(ctx, cmds)
		}
		h.pipelines.Add(1)
		h.cmds.Add(int64(len(cmds)))
		h.mu.Lock()
		h.sizes = append(h.sizes, len(cmds))
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

func countedStore(t *testing.T, addr string, opts redisstore.RedisOptions) (*redisstore.RedisStore, *pipelineCounter) {
	t.Helper()
	return countedClientStore(t, redisstore.RedisClientOptions{Addrs: []string{addr}}, opts)
}

// countedClientStore is countedStore on a client made with co.
func countedClientStore(t *testing.T, co redisstore.RedisClientOptions, opts redisstore.RedisOptions) (*redisstore.RedisStore, *pipelineCounter) {
	t.Helper()
	client := redisstore.NewRedisClient(co)
	h := &pipelineCounter{}
	client.AddHook(h)
	s := redisstore.NewRedisStore(client, opts)
	t.Cleanup(func() { _ = s.Close() })
	return s, h
}

// TestCoalesceLoneCallsGoAlone: calls made one after another each go out
// in a pipeline of their own, at once (a writer never waits for company).
//
// Nothing is timed. The store runs in a synctest bubble, whose clock moves
// only when every goroutine in it is blocked on a timer, a sleep or a
// channel; waiting for Redis's reply is network I/O, which does not move
// it. So the
// bubble's clock standing still across the calls shows that none of them
// waited for a batch to fill or for a timer, however slow the machine.
func TestCoalesceLoneCallsGoAlone(t *testing.T) {
	srv := redistest.StartStandalone(t)
	prefix := redistest.KeyPrefix(t)
	inBubble(t, func(t *testing.T) {
		client := redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{srv.Addr}})
		h := &pipelineCounter{}
		client.AddHook(h)
		s := redisstore.NewRedisStore(client, redisstore.RedisOptions{Timeout: time.Second})
		defer func() { _ = s.Close() }()
		it := tb(prefix+"{lone}k", 1000, 1000, time.Second, 1)
		storetest.WarmUp(t, s, []ratelimit.Item{it})
		p0, c0 := h.pipelines.Load(), h.cmds.Load()
		const n = 50
		start := time.Now()
		for range n {
			mustDecide(t, s, it)
		}
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("%d sequential decisions waited %v on timers: a lone call waited for company", n, waited)
		}
		if pipes, cmds := h.pipelines.Load()-p0, h.cmds.Load()-c0; pipes != n || cmds != n {
			t.Fatalf("%d sequential decisions went out as %d calls in %d pipelines, want %d in %d", n, cmds, pipes, n, n)
		}
	})
}

// inBubble runs f in a synctest bubble (see synctest.Test). Channels and
// timers made in a bubble must not be used outside it. A store keeps its
// script calls (which hold both) to itself, so a store made in f leaves
// nothing behind for other tests; go-redis pools timers across clients,
// but takes one only when every connection of a client is in use, which
// sequential decisions never reach.
func inBubble(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	synctest.Test(t, f)
}

// TestCoalesceCallsStayWithTheirStore: the script calls a store made in a
// synctest bubble are not used by a store outside it, whose writer would
// otherwise send on a bubble's channel from outside (a panic). Nothing
// is collected in between, so a call left in a pool shared by stores
// would still be there.
func TestCoalesceCallsStayWithTheirStore(t *testing.T) {
	srv := redistest.StartStandalone(t)
	it := tb(redistest.KeyPrefix(t)+"{stay}k", 1000, 1000, time.Second, 1)
	inBubble(t, func(t *testing.T) {
		s := redisstore.NewRedisStore(redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{srv.Addr}}), redisstore.RedisOptions{})
		defer func() { _ = s.Close() }()
		for range 10 {
			mustDecide(t, s, it)
		}
	})
	s := redisstore.NewRedisStore(redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{srv.Addr}}), redisstore.RedisOptions{})
	defer func() { _ = s.Close() }()
	for range 10 {
		mustDecide(t, s, it)
	}
}

// TestCoalesceBatchesConcurrentCalls: concurrent decisions share
// pipelines, and every one of them is still decided exactly (a bucket of
// 500 admits exactly 500 of 1000 concurrent requests).
func TestCoalesceBatchesConcurrentCalls(t *testing.T) {
	srv := redistest.StartStandalone(t)
	s, h := countedStore(t, srv.Addr, redisstore.RedisOptions{Timeout: 2 * time.Second, Coalesce: redisstore.CoalesceOptions{Writers: 2}})
	prefix := redistest.KeyPrefix(t)
	hot := tb(prefix+"{hot}k", 1, 500, time.Hour, 1)
	storetest.WarmUp(t, s, []ratelimit.Item{tb(prefix+"{warm}k", 1, 1, time.Hour, 0)})
	p0, c0 := h.pipelines.Load(), h.cmds.Load()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 64 {
		wg.Go(func() {
			for range 1000 / 64 {
				d, err := s.Decide(context.Background(), []ratelimit.Item{hot})
				if err != nil {
					errs <- err
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	calls := (1000 / 64) * 64
	if admitted.Load() != 500 {
		t.Fatalf("admitted %d of %d, want exactly 500", admitted.Load(), calls)
	}
	pipes, cmds := h.pipelines.Load()-p0, h.cmds.Load()-c0
	t.Logf("%d calls in %d pipelines (%.1f per pipeline)", cmds, pipes, float64(cmds)/float64(pipes))
	if cmds != int64(calls) {
		t.Fatalf("%d script calls for %d decisions, want one each", cmds, calls)
	}
	if float64(cmds)/float64(pipes) < 2 {
		t.Fatalf("%d calls in %d pipelines: not coalesced", cmds, pipes)
	}
}

// TestCoalesceAbandonedCallsNeverSent: calls queued behind a stuck
// pipeline (Redis paused, one writer slot) return when their deadline
// passes, while that pipeline is still stuck, and are never sent: the
// first writer once Redis is back takes them from the queue with its own
// call and skips them, so only the call that was in flight consumes.
// Nothing is timed: the stuck call's deadline (and socket timeouts) are a
// minute, the queued calls' deadline 60 ms, and a queued call that waited
// for the stuck one would return after it.
func TestCoalesceAbandonedCallsNeverSent(t *testing.T) {
	srv := redistest.StartStandalone(t)
	s, h := countedClientStore(t,
		redisstore.RedisClientOptions{Addrs: []string{srv.Addr}, ReadTimeout: time.Minute, WriteTimeout: time.Minute},
		redisstore.RedisOptions{Timeout: time.Minute, Coalesce: redisstore.CoalesceOptions{Writers: 1, MaxBatch: 16}})
	it := tb(redistest.KeyPrefix(t)+"{stuck}k", 1, 100, time.Hour, 1)
	peek := it
	peek.Cost = 0
	storetest.WarmUp(t, s, []ratelimit.Item{peek})
	sent0 := h.cmds.Load()

	srv.Pause()
	stuckDone := make(chan struct{})
	var stuck ratelimit.Decision
	var stuckErr error
	go func() {
		defer close(stuckDone)
		stuck, stuckErr = s.Decide(context.Background(), []ratelimit.Item{it})
	}()
	// Once its pipeline is sent, the stuck call holds the one writer slot.
	for h.cmds.Load() == sent0 {
		select {
		case <-stuckDone:
			srv.Resume()
			t.Fatalf("a call to the paused Redis returned before it was sent: %v", stuckErr)
		case <-time.After(time.Millisecond): // polling the hook's count
		}
	}

	const queued = 9
	var after atomic.Int64 // queued callers that returned after the stuck call
	var wg sync.WaitGroup
	for range queued {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Millisecond)
			defer cancel()
			_, err := s.Decide(ctx, []ratelimit.Item{it})
			select {
			case <-stuckDone:
				after.Add(1)
			default:
			}
			if !errors.Is(err, ratelimit.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("queued call: err = %v, want ErrUnavailable wrapping DeadlineExceeded", err)
			}
		})
	}
	wg.Wait()
	sentPaused := h.cmds.Load() - sent0
	srv.Resume()
	<-stuckDone
	if n := after.Load(); n > 0 {
		t.Errorf("%d of %d queued callers returned only after the stuck call (%v): they waited for it past their deadline", n, queued, stuckErr)
	}
	if sentPaused != 1 {
		t.Errorf("%d calls sent while Redis was paused, want only the stuck one", sentPaused)
	}
	if stuckErr != nil || !stuck.Allowed {
		t.Fatalf("the stuck call once Redis was back: %+v, %v; want allowed", stuck, stuckErr)
	}
	rem := mustDecide(t, s, peek).Results[0].Remaining
	if sent := h.cmds.Load() - sent0; rem != 99 || sent != 2 {
		t.Fatalf("remaining %d after the stuck call and %d abandoned ones, %d calls sent with the peek; want 99 and 2: abandoned calls were sent",
			rem, queued, sent)
	}
}

// TestCoalesceClosedStore: a Decide on a closed store fails with
// ErrUnavailable instead of hanging.
func TestCoalesceClosedStore(t *testing.T) {
	srv := redistest.StartStandalone(t)
	s := redisstore.NewRedisStore(redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{srv.Addr}}), redisstore.RedisOptions{})
	it := tb(redistest.KeyPrefix(t)+"{c}k", 1, 10, time.Hour, 1)
	mustDecide(t, s, it)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Decide(context.Background(), []ratelimit.Item{it})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ratelimit.ErrUnavailable) {
			t.Fatalf("Decide after Close: %v, want ErrUnavailable", err)
		}
	case <-time.After(missAfter):
		proctest.FatalOverrun(t, "Decide after Close had not returned after %v", missAfter)
	}
}
