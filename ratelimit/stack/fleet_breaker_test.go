package stack

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

// TestBreakerDoFollowsKeyDomain: a call through Breaker.Do is refused,
// unmade, while its key's domain is open, and goes through in another
// domain; after the cooldown it is the probe, whose success closes the
// domain; its failures open a domain as decisions' do.
func TestBreakerDoFollowsKeyDomain(t *testing.T) {
	now := time.Unix(1000, 0)
	b := NewBreaker(domainStore{down: map[string]bool{"a": true}}, BreakerOptions{
		Failures: 2, Cooldown: time.Second, Now: func() time.Time { return now },
		Partition: func(_ context.Context, items []ratelimit.Item) string { return items[0].Key },
	})
	ctx := context.Background()
	for range 2 {
		_, _ = b.Decide(ctx, []ratelimit.Item{{Key: "a"}})
	}
	calls := 0
	op := func(err error) func(context.Context) error {
		return func(context.Context) error { calls++; return err }
	}
	if err := b.Do(ctx, "a", op(nil)); !errors.Is(err, ratelimit.ErrBreakerOpen) || !errors.Is(err, ratelimit.ErrUnavailable) || calls != 0 {
		t.Fatalf("Do in the open domain: %v after %d calls, want ratelimit.ErrBreakerOpen and none", err, calls)
	}
	if err := b.Do(ctx, "b", op(nil)); err != nil || calls != 1 {
		t.Fatalf("Do in the closed domain: %v after %d calls, want nil and 1", err, calls)
	}
	now = now.Add(time.Second)
	if err := b.Do(ctx, "a", op(nil)); err != nil || calls != 2 {
		t.Fatalf("Do as the probe: %v after %d calls, want nil and 2", err, calls)
	}
	if st := b.States(); st["a"] != BreakerClosed {
		t.Fatalf("States after a successful probe by Do: %v, want a closed", st)
	}
	failed := ratelimit.Unavailable("heartbeat", errors.New("connection refused"))
	for range 2 {
		if err := b.Do(ctx, "b", op(failed)); !errors.Is(err, ratelimit.ErrUnavailable) || errors.Is(err, ratelimit.ErrBreakerOpen) {
			t.Fatalf("failing Do: %v, want the op's error", err)
		}
	}
	if st := b.States(); st["b"] != BreakerOpen {
		t.Fatalf("States after 2 failed calls by Do: %v, want b open", st)
	}
}
