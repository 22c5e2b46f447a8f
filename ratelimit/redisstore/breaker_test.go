package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// TestBreakerPausedRedis opens the breaker on a hung (SIGSTOP) Redis: the
// calls that open it end at the store's timeout; once open, calls fail
// without reaching the store at all (so without waiting for the timeout);
// after Resume and the cooldown a probe closes it again. Nothing is timed:
// the store's calls are counted, and its timeouts told apart by their
// error.
func TestBreakerPausedRedis(t *testing.T) {
	srv := redistest.StartStandalone(t)
	const timeout = 100 * time.Millisecond
	store := &storetest.CountingStore{Store: newRedisStore(t, []string{srv.Addr}, nil, timeout)}
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	b := stack.NewBreaker(store, stack.BreakerOptions{Failures: 3, Cooldown: time.Second, Now: clock.Now})
	items := []ratelimit.Item{{Key: "{brk}k", Algorithm: ratelimit.TokenBucket, Limit: ratelimit.Limit{Rate: 10, Per: time.Second, Burst: 10}, Cost: 1}}
	ctx := context.Background()
	storetest.WarmUp(t, store, items)

	srv.Pause()
	defer srv.Resume()
	for i := range 3 {
		_, err := b.Decide(ctx, items)
		if !errors.Is(err, ratelimit.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ratelimit.ErrBreakerOpen) {
			t.Fatalf("call %d on a paused Redis: err = %v, want the store's ErrUnavailable wrapping DeadlineExceeded (the hang under test)", i, err)
		}
	}
	if b.State() != stack.BreakerOpen {
		t.Fatalf("state %v after 3 timeouts", b.State())
	}
	before := store.Calls()
	for range 100 {
		if _, err := b.Decide(ctx, items); !errors.Is(err, ratelimit.ErrBreakerOpen) {
			t.Fatalf("open breaker: %v", err)
		}
	}
	if n := store.Calls() - before; n != 0 {
		t.Fatalf("%d of 100 calls on an open breaker reached the paused store", n)
	}

	srv.Resume()
	clock.Add(time.Second)
	if _, err := b.Decide(ctx, items); err != nil {
		t.Fatalf("probe after Resume: %v", err)
	}
	if b.State() != stack.BreakerClosed {
		t.Fatalf("state %v after a successful probe", b.State())
	}
}
