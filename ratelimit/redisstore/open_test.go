package redisstore_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
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

// breakerAtCalls is a redis.Hook that records, for each pipeline of
// script calls a stack sends, the state of the stack's breaker at that
// moment, whether or not a server answers.
type breakerAtCalls struct {
	stack atomic.Pointer[ratelimit.Stack]
	mu    sync.Mutex
	seen  []ratelimit.BreakerState
}

func (h *breakerAtCalls) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h *breakerAtCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *breakerAtCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if s := h.stack.Load(); s != nil && len(cmds) > 0 && (cmds[0].Name() == "fcall" || cmds[0].Name() == "evalsha") {
			h.mu.Lock()
			h.seen = append(h.seen, s.Health().Breaker)
			h.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// take returns the states recorded since the last take.
func (h *breakerAtCalls) take() []ratelimit.BreakerState {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := h.seen
	h.seen = nil
	return seen
}

// TestOpenBreakerCooldownOnItsClock: the breaker Open builds times its
// cooldown on the clock it is given, so the whole cycle on a frozen Redis
// (SIGSTOP) is exact: three timeouts open it; every decision after that
// is refused without a script call until the cooldown has passed to the
// nanosecond; then one probe goes out half-open, fails and opens the
// breaker for another cooldown; after that one the probe finds Redis
// back, closes the breaker, and decisions go to Redis again.
//
// The cooldown is a minute, which the test never waits in real time: only
// the stepped clock can end it. The store's deadline (250ms) ends the
// calls to the frozen Redis; one that Redis, back, does not answer in
// time is a missed deadline, reported as such.
func TestOpenBreakerCooldownOnItsClock(t *testing.T) {
	srv := redistest.StartStandalone(t)
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	const cooldown = time.Minute
	h := &breakerAtCalls{}
	s := redisstore.Open(redisstore.WithBreakerClock(redisstore.Config{
		Addrs: []string{srv.Addr}, Timeout: 250 * time.Millisecond, BreakerFailures: 3, BreakerCooldown: cooldown,
		FleetStatic: true, FleetSize: 1, Hook: h,
	}, clock.Now))
	t.Cleanup(func() { _ = s.Close() })
	h.stack.Store(s)
	it := tb(redistest.KeyPrefix(t)+"{brk}k", 1, 1_000_000, time.Hour, 1)
	it.OnError = ratelimit.OnErrorOpen
	// failure decides it and returns the store's failure, nil when Redis
	// decided.
	failure := func() error {
		t.Helper()
		d, err := s.Decide(context.Background(), []ratelimit.Item{it})
		if err != nil {
			t.Fatalf("Decide: %v", err)
		}
		return d.Failure
	}
	// answered requires that Redis decided; a failure is the deadline
	// missed by Redis, up and unloaded, on a slow machine.
	answered := func(what string) {
		t.Helper()
		if err := failure(); err != nil {
			proctest.FatalOverrun(t, "%s: Redis did not answer within the store's 250ms deadline: %v", what, err)
		}
	}
	refused := func(what string) {
		t.Helper()
		if err := failure(); !errors.Is(err, ratelimit.ErrBreakerOpen) {
			t.Fatalf("%s: failure %v, want a refusal by the open breaker", what, err)
		}
	}
	expect := func(what string, want ...ratelimit.BreakerState) {
		t.Helper()
		if got := h.take(); !slices.Equal(got, want) {
			t.Fatalf("%s: script calls sent with the breaker %v, want %v", what, got, want)
		}
	}
	state := func(what string, want ratelimit.BreakerState) {
		t.Helper()
		if got := s.Health().Breaker; got != want {
			t.Fatalf("%s: breaker %v, want %v", what, got, want)
		}
	}
	closed, open, halfOpen := ratelimit.BreakerClosed, ratelimit.BreakerOpen, ratelimit.BreakerHalfOpen

	answered("first decision")
	h.take() // a fresh server may need more than one call (the library is loaded)

	srv.Pause()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	for i := range 3 {
		if err := failure(); !errors.Is(err, ratelimit.ErrUnavailable) || errors.Is(err, ratelimit.ErrBreakerOpen) {
			t.Fatalf("decision %d on the frozen Redis: failure %v, want the store's", i+1, err)
		}
	}
	expect("three decisions on the frozen Redis", closed, closed, closed)
	state("after three failures", open)

	const refusals = 10
	for i := range refusals {
		refused("decision " + strconv.Itoa(i+1) + " with the breaker open")
	}
	clock.Add(cooldown - time.Nanosecond)
	refused("a nanosecond before the cooldown's end")
	expect("refused decisions")
	state("a nanosecond before the cooldown's end", open)

	clock.Add(time.Nanosecond)
	state("at the cooldown's end", halfOpen)
	if err := failure(); !errors.Is(err, ratelimit.ErrUnavailable) || errors.Is(err, ratelimit.ErrBreakerOpen) {
		t.Fatalf("the probe to the frozen Redis: failure %v, want the store's", err)
	}
	expect("the probe to the frozen Redis", halfOpen)
	state("after the failed probe", open)
	refused("after the failed probe")
	expect("refused after the failed probe")

	srv.Resume()
	resumed = true
	clock.Add(cooldown)
	state("at the second cooldown's end", halfOpen)
	answered("the probe to Redis back")
	expect("the probe to Redis back", halfOpen)
	state("after the probe Redis answered", closed)
	answered("the decision after the probe")
	expect("the decision after the probe", closed)
}
