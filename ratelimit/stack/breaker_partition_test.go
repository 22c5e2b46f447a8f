package stack

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

// domainStore fails every batch whose first key is in down.
type domainStore struct{ down map[string]bool }

func (s domainStore) Decide(_ context.Context, items []ratelimit.Item) (ratelimit.Decision, error) {
	if s.down[items[0].Key] {
		return ratelimit.Decision{}, ratelimit.ErrUnavailable
	}
	return ratelimit.Decision{Allowed: true, Results: make([]ratelimit.Result, len(items))}, nil
}

func (domainStore) Close() error { return nil }

// TestBreakerPartitionsIsolateDomains: failures of one domain open only that
// domain's breaker; the other domain keeps calling the store.
func TestBreakerPartitionsIsolateDomains(t *testing.T) {
	now := time.Unix(1000, 0)
	b := NewBreaker(domainStore{down: map[string]bool{"a": true}}, BreakerOptions{
		Failures: 2, Cooldown: time.Second, Now: func() time.Time { return now },
		Partition: func(_ context.Context, items []ratelimit.Item) string { return items[0].Key },
	})
	call := func(key string) error {
		_, err := b.Decide(context.Background(), []ratelimit.Item{{Key: key}})
		return err
	}
	for i := 0; i < 2; i++ {
		if err := call("a"); !errors.Is(err, ratelimit.ErrUnavailable) || errors.Is(err, ratelimit.ErrBreakerOpen) {
			t.Fatalf("failure %d of domain a: %v", i, err)
		}
	}
	if err := call("a"); !errors.Is(err, ratelimit.ErrBreakerOpen) {
		t.Fatalf("domain a after 2 failures: %v, want open", err)
	}
	for i := 0; i < 5; i++ {
		if err := call("b"); err != nil {
			t.Fatalf("domain b must be unaffected: %v", err)
		}
	}
	if b.State() != BreakerOpen || b.AllOpen() {
		t.Fatalf("State %v AllOpen %v: want open (worst) and not all open", b.State(), b.AllOpen())
	}
	if st := b.States(); len(st) != 2 || st["a"] != BreakerOpen || st["b"] != BreakerClosed {
		t.Fatalf("States = %v, want a open and b closed", st)
	}
	now = now.Add(time.Second)
	if st := b.State(); st != BreakerHalfOpen {
		t.Fatalf("after cooldown: %v", st)
	}
	if st := b.States(); st["a"] != BreakerHalfOpen || st["b"] != BreakerClosed {
		t.Fatalf("States after cooldown = %v, want a half-open and b closed", st)
	}
	single := NewBreaker(domainStore{}, BreakerOptions{})
	if st := single.States(); len(st) != 1 || st[""] != BreakerClosed {
		t.Fatalf("States without Partition = %v, want one closed domain named \"\"", st)
	}
}

// TestBreakerUnknownDomainLeftOut: the domain "" (calls made before the
// Partition could tell their domain, as a Cluster's before its slot map
// is known) does not count once other domains exist while it is closed:
// every named domain open is AllOpen, and States lists only them. Open,
// it counts like any other.
func TestBreakerUnknownDomainLeftOut(t *testing.T) {
	now := time.Unix(1000, 0)
	down := map[string]bool{"a": true}
	b := NewBreaker(domainStore{down: down}, BreakerOptions{
		Failures: 2, Cooldown: time.Second, Now: func() time.Time { return now },
		Partition: func(_ context.Context, items []ratelimit.Item) string {
			if items[0].Key == "?" {
				return ""
			}
			return items[0].Key
		},
	})
	call := func(key string) error {
		_, err := b.Decide(context.Background(), []ratelimit.Item{{Key: key}})
		return err
	}
	if err := call("?"); err != nil {
		t.Fatalf("a call of no known domain: %v", err)
	}
	for range 2 {
		_ = call("a")
	}
	if !b.AllOpen() {
		t.Errorf("AllOpen false with the only named domain open and the unknown one closed (States %v)", b.States())
	}
	if st := b.States(); len(st) != 1 || st["a"] != BreakerOpen {
		t.Errorf("States = %v, want only a, open", st)
	}
	down["?"] = true
	for range 2 {
		_ = call("?")
	}
	if st := b.States(); len(st) != 2 || st[""] != BreakerOpen {
		t.Errorf("States = %v with the unknown domain open, want it listed, open", st)
	}
	if !b.AllOpen() || b.State() != BreakerOpen {
		t.Errorf("AllOpen %v, State %v with every domain open", b.AllOpen(), b.State())
	}
}
