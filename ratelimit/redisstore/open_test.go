package redisstore_test

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// breakerAtCalls is a redis.Hook that records, for each pipeline of
// script calls a stack sends, the state of the stack's breaker at that
// moment, whether or not a server answers.
type breakerAtCalls struct {
	stack atomic.Pointer[stack.Stack]
	mu    sync.Mutex
	seen  []stack.BreakerState
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
func (h *breakerAtCalls) take() []stack.BreakerState {
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
	expect := func(what string, want ...stack.BreakerState) {
		t.Helper()
		if got := h.take(); !slices.Equal(got, want) {
			t.Fatalf("%s: script calls sent with the breaker %v, want %v", what, got, want)
		}
	}
	state := func(what string, want stack.BreakerState) {
		t.Helper()
		if got := s.Health().Breaker; got != want {
			t.Fatalf("%s: breaker %v, want %v", what, got, want)
		}
	}
	closed, open, halfOpen := stack.BreakerClosed, stack.BreakerOpen, stack.BreakerHalfOpen

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

// TestOpenClusterSilentAtStart: a store opened while every Cluster seed
// accepts connections and answers nothing (frozen nodes, or a network
// that drops replies), so that the client has never learnt the slot map.
// A decision then asks the seeds for it within its own deadline only (one
// CLUSTER SLOTS at most: the deadline has passed once one seed has not
// answered), and once the breaker has opened, decisions are refused
// without a command sent. Before, each decision asked every seed, each
// for a full read timeout, two or three times over, and so did every
// decision the open breaker refused. Nothing is timed: the seeds count
// the commands they read.
func TestOpenClusterSilentAtStart(t *testing.T) {
	seeds := []*redistest.Hostile{redistest.StartHostile(t, nil, "CLUSTER"), redistest.StartHostile(t, nil, "CLUSTER")}
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	s := redisstore.Open(redisstore.WithBreakerClock(redisstore.Config{
		Addrs: []string{seeds[0].Addr, seeds[1].Addr}, Timeout: 100 * time.Millisecond,
		BreakerFailures: 3, BreakerCooldown: time.Minute, FleetStatic: true, FleetSize: 1,
	}, clock.Now))
	t.Cleanup(func() { _ = s.Close() })
	it := tb(redistest.KeyPrefix(t)+"{silent}k", 1, 100, time.Hour, 1)
	it.OnError = ratelimit.OnErrorOpen
	// asked is the CLUSTER commands the seeds have read so far. A command
	// is written at least the store's deadline before the decision that
	// sent it returns, but a seed may read it later: a count taken after
	// a decision may miss the commands of that decision, never add any.
	asked := func() int64 { return seeds[0].Answered.Load() + seeds[1].Answered.Load() }
	decide := func() error { t.Helper(); return failureOpen(t, s, it) }
	const failures = 3
	for i := range failures {
		if err := decide(); !errors.Is(err, ratelimit.ErrUnavailable) || errors.Is(err, ratelimit.ErrBreakerOpen) {
			t.Fatalf("decision %d on the silent Cluster: failure %v, want the store's", i+1, err)
		}
	}
	if n := asked(); n > failures {
		t.Errorf("%d decisions sent %d CLUSTER commands to the silent seeds, want at most one each (within the decision's deadline)", failures, n)
	}
	if st := s.Health().Breaker; st != stack.BreakerOpen {
		t.Fatalf("breaker %v after %d failures, want open", st, failures)
	}
	before := asked()
	const refusals = 10
	for i := range refusals {
		if err := decide(); !errors.Is(err, ratelimit.ErrBreakerOpen) {
			t.Fatalf("decision %d with the breaker open: failure %v, want a refusal by the breaker", i+1, err)
		}
	}
	// At most the one command of the last failed decision may have been
	// read after before was taken.
	if n := asked() - before; n > 1 {
		t.Errorf("%d decisions refused by the open breaker sent %d CLUSTER commands, want none", refusals, n)
	}
}

// TestOpenClusterBackAfterSilentStart: a store opened while every primary
// of a real Cluster is frozen (SIGSTOP) fails its decisions until its
// breaker opens; once the Cluster runs again and the cooldown has passed,
// the probe finds it, and the breaker state the gateway exports
// (Health().Breaker, quotagate_store_breaker_state) is closed again.
// Before, the failures were counted in a domain named "" (no primary
// known), the probe went to the primary's own domain, and the "" domain
// stayed open, so the state read half-open for as long as the process
// ran.
func TestOpenClusterBackAfterSilentStart(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	s := redisstore.Open(redisstore.WithBreakerClock(redisstore.Config{
		Addrs: c.Addrs(), Timeout: 250 * time.Millisecond,
		BreakerFailures: 3, BreakerCooldown: time.Minute, FleetStatic: true, FleetSize: 1,
	}, clock.Now))
	t.Cleanup(func() { _ = s.Close() })
	it := tb(redistest.KeyPrefix(t)+"{back}k", 1, 100, time.Hour, 1)
	it.OnError = ratelimit.OnErrorOpen
	decide := func() error { t.Helper(); return failureOpen(t, s, it) }
	for _, n := range c.Nodes() {
		n.Pause()
	}
	for i := range 3 {
		if err := decide(); !errors.Is(err, ratelimit.ErrUnavailable) || errors.Is(err, ratelimit.ErrBreakerOpen) {
			t.Fatalf("decision %d on the frozen Cluster: failure %v, want the store's", i+1, err)
		}
	}
	if st := s.Health().Breaker; st != stack.BreakerOpen {
		t.Fatalf("breaker %v after 3 failures, want open", st)
	}
	for _, n := range c.Nodes() {
		n.Resume()
	}
	if err := c.WaitOK(30 * time.Second); err != nil {
		proctest.FatalOverrun(t, "the Cluster did not recover within 30s of its resume: %v", err)
	}
	clock.Add(time.Minute)
	if err := decide(); err != nil {
		proctest.FatalOverrun(t, "the probe after the cooldown: %v (the Cluster, back, did not answer within 250ms)", err)
	}
	if st := s.Health().Breaker; st != stack.BreakerClosed {
		t.Errorf("breaker %v once the probe found the Cluster back (domains %v), want closed", st, s.BreakerStates())
	}
}

// failureOpen decides it, whose on_store_error is open, on s and returns
// the store's failure (nil when the store decided).
func failureOpen(t *testing.T, s *stack.Stack, it ratelimit.Item) error {
	t.Helper()
	d, err := s.Decide(context.Background(), []ratelimit.Item{it})
	if err != nil || !d.Allowed {
		t.Fatalf("Decide: %+v, %v; want allowed (on_store_error open)", d, err)
	}
	return d.Failure
}

// TestOpenPingClusterWhileAnyPrimaryAnswers: the readiness PING of a
// Cluster stack succeeds while any primary answers: with one primary of
// three dead, and then a second frozen, every PING succeeds (a lone PING
// went to the owner of a random slot, so a third of them failed, and
// /readyz flapped); with none answering it fails, wrapping
// ErrUnavailable.
func TestOpenPingClusterWhileAnyPrimaryAnswers(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	s := redisstore.Open(redisstore.Config{Addrs: c.Addrs(), Timeout: 250 * time.Millisecond, FleetStatic: true, FleetSize: 1})
	t.Cleanup(func() { _ = s.Close() })
	ping := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return s.Ping(ctx)
	}
	if err := ping(10 * time.Second); err != nil {
		t.Fatalf("PING with every primary up: %v", err)
	}
	nodes := c.Nodes()
	nodes[1].Kill()
	for i := range 30 {
		if err := ping(10 * time.Second); err != nil {
			t.Fatalf("PING %d with one primary of three dead: %v, want nil", i+1, err)
		}
	}
	nodes[0].Pause()
	defer nodes[0].Resume()
	for i := range 10 {
		if err := ping(10 * time.Second); err != nil {
			t.Fatalf("PING %d with one primary dead and one frozen: %v, want nil", i+1, err)
		}
	}
	nodes[2].Kill()
	if err := ping(time.Second); !errors.Is(err, ratelimit.ErrUnavailable) {
		t.Errorf("PING with no primary answering: %v, want ErrUnavailable", err)
	}
}

// TestOpenClusterAllDownAfterHealthyStart: on a Cluster that answered
// from the start, once every primary is dead and each one's breaker has
// opened, the stack reports the store all down (readiness then says
// "store circuit open" without a PING, and concurrency slots are no
// longer released to it): the domain of the first decisions, made
// before the slot map was known, does not keep it up.
func TestOpenClusterAllDownAfterHealthyStart(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	s := redisstore.Open(redisstore.Config{Addrs: c.Addrs(), Timeout: 250 * time.Millisecond,
		BreakerFailures: 2, BreakerCooldown: time.Hour, FleetStatic: true, FleetSize: 1})
	t.Cleanup(func() { _ = s.Close() })
	prefix := redistest.KeyPrefix(t)
	var items []ratelimit.Item
	for _, n := range c.Nodes() {
		for i := 0; ; i++ {
			if k := fmt.Sprintf("%s{all%d}k", prefix, i); c.PrimaryForKey(k) == n {
				it := tb(k, 1, 100, time.Hour, 1)
				it.OnError = ratelimit.OnErrorOpen
				items = append(items, it)
				break
			}
		}
	}
	for _, it := range items {
		if err := failureOpen(t, s, it); err != nil {
			proctest.FatalOverrun(t, "decision on the healthy Cluster: %v", err)
		}
	}
	for _, n := range c.Nodes() {
		n.Kill()
	}
	for _, it := range items {
		for range 2 {
			_ = failureOpen(t, s, it)
		}
	}
	if h := s.Health(); !h.AllDown || h.Breaker != stack.BreakerOpen {
		t.Errorf("health %+v with every primary dead and its breaker open (domains %v), want all down", h, s.BreakerStates())
	}
}
