package stack

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

// TestBreakerDropsGoneDomains: a domain that BreakerOptions.Live reports
// gone (a Cluster primary replaced by its replica) leaves State, States
// and AllOpen, and its state is freed, while an open domain that lives
// stays open; a later call in the gone name starts a closed domain.
func TestBreakerDropsGoneDomains(t *testing.T) {
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	gone := map[string]bool{}
	b := NewBreaker(domainStore{down: map[string]bool{"old": true, "dead": true}}, BreakerOptions{
		Failures: 1, Cooldown: time.Second, Now: func() time.Time { return now },
		Partition: func(_ context.Context, items []ratelimit.Item) string { return items[0].Key },
		Live: func(name string) bool {
			mu.Lock()
			defer mu.Unlock()
			return !gone[name]
		},
	})
	call := func(key string) { _, _ = b.Decide(context.Background(), []ratelimit.Item{{Key: key}}) }
	call("old")
	call("new")
	if st := b.States(); len(st) != 2 || st["old"] != BreakerOpen || st["new"] != BreakerClosed {
		t.Fatalf("States = %v, want old open, new closed", st)
	}
	mu.Lock()
	gone["old"] = true
	mu.Unlock()
	if st := b.States(); len(st) != 1 || st["new"] != BreakerClosed {
		t.Errorf("States = %v with old gone, want only new, closed", st)
	}
	if st := b.State(); st != BreakerClosed {
		t.Errorf("State = %v with old gone and new closed, want closed", st)
	}
	b.mu.Lock()
	_, kept := b.cells["old"]
	b.mu.Unlock()
	if kept {
		t.Errorf("the state of the gone domain old is still held")
	}
	call("dead")
	if st := b.States(); st["dead"] != BreakerOpen || b.State() != BreakerOpen {
		t.Errorf("States = %v, State = %v: a live domain's open breaker must stay open", st, b.State())
	}
	now = now.Add(time.Hour)
	mu.Lock()
	gone["old"] = false
	mu.Unlock()
	call("new")
	if st := b.States(); len(st) != 2 || st["dead"] != BreakerHalfOpen {
		t.Errorf("States = %v, want new and dead (half-open) only", st)
	}
	if b.AllOpen() {
		t.Errorf("AllOpen with new closed")
	}
}

// TestBreakerGoneBrieflyStaysOpen: a domain that Live reports gone for a
// moment (a slot map read missing a primary that is down) and that a call
// names again soon after goes on open: the calls are refused, rather than
// Failures calls waiting for the dead primary again on a closed domain.
// A name that returns after breakerGoneKeep starts closed.
func TestBreakerGoneBrieflyStaysOpen(t *testing.T) {
	now := time.Unix(1000, 0)
	gone := false
	store := &countingStore{down: true}
	b := NewBreaker(store, BreakerOptions{
		Failures: 3, Cooldown: time.Hour, Now: func() time.Time { return now },
		Partition: func(_ context.Context, items []ratelimit.Item) string { return items[0].Key },
		Live:      func(string) bool { return !gone },
	})
	call := func() { _, _ = b.Decide(context.Background(), []ratelimit.Item{{Key: "dead"}}) }
	for range 3 {
		call()
	}
	if st := b.States()["dead"]; st != BreakerOpen || store.calls != 3 {
		t.Fatalf("after 3 failures: dead is %v with %d calls, want open after 3", st, store.calls)
	}
	gone = true
	if st := b.States(); len(st) != 0 {
		t.Errorf("States = %v with dead gone, want none", st)
	}
	gone = false
	call()
	if st := b.States()["dead"]; st != BreakerOpen || store.calls != 3 {
		t.Errorf("dead back at once: %v, %d calls to the store, want still open and 3", st, store.calls)
	}

	gone = true
	_ = b.States()
	gone = false
	now = now.Add(breakerGoneKeep)
	call()
	if st := b.States()["dead"]; st != BreakerClosed || store.calls != 4 {
		t.Errorf("dead back after %v: %v, %d calls to the store, want closed and 4", breakerGoneKeep, st, store.calls)
	}
}

// countingStore counts its calls and fails them while down.
type countingStore struct {
	down  bool
	calls int
}

func (s *countingStore) Decide(_ context.Context, items []ratelimit.Item) (ratelimit.Decision, error) {
	s.calls++
	if s.down {
		return ratelimit.Decision{}, ratelimit.ErrUnavailable
	}
	return ratelimit.Decision{Allowed: true, Results: make([]ratelimit.Result, len(items))}, nil
}

func (*countingStore) Close() error { return nil }

// BenchmarkBreakerAllOpenDomains is the cost of AllOpen with Live and
// Domains (a Cluster of 3 primaries, all decided on, one open): Stack asks
// it on every Release and Renew of a concurrency slot.
func BenchmarkBreakerAllOpenDomains(b *testing.B) {
	names := []string{"a", "b", "c"}
	br := NewBreaker(domainStore{down: map[string]bool{"a": true}}, BreakerOptions{
		Failures:  1,
		Partition: func(_ context.Context, items []ratelimit.Item) string { return items[0].Key },
		Live:      func(string) bool { return true },
		Domains:   func() []string { return names },
	})
	for _, n := range names {
		_, _ = br.Decide(context.Background(), []ratelimit.Item{{Key: n}})
	}
	b.ReportAllocs()
	for b.Loop() {
		if br.AllOpen() {
			b.Fatal("AllOpen with two domains closed")
		}
	}
}
