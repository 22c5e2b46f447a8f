package stack_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// fbItem is a token-bucket item of cost 1 and burst 100 with its
// on_store_error mode; in a fleet of 50 its local share is a burst of 2.
func fbItem(key string, mode ratelimit.OnError, shadow bool) ratelimit.Item {
	return ratelimit.Item{Key: key, Algorithm: ratelimit.TokenBucket, Cost: 1, Shadow: shadow, OnError: mode,
		Limit: ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 100}}
}

// TestFallbackModes: while the store below fails, open items are allowed,
// local ones are decided on their share, and a non-shadow closed item
// refuses the batch as unavailable; the store's error is in Failure.
func TestFallbackModes(t *testing.T) {
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	inner := &flakyStore{}
	fb := stack.NewFallback(inner, stack.FallbackOptions{RetryAfter: 3 * time.Second, Now: clock.Now, FleetSize: 50})
	defer fb.Close()
	ctx := context.Background()

	d, err := fb.Decide(ctx, []ratelimit.Item{fbItem("a", ratelimit.OnErrorClosed, false)})
	if err != nil || d.Failure != nil || !d.Allowed {
		t.Fatalf("store up: %+v, %v; want its own decision", d, err)
	}

	inner.set(errDown)
	open, local, shadowClosed := fbItem("o", ratelimit.OnErrorOpen, false), fbItem("l", ratelimit.OnErrorLocal, false), fbItem("s", ratelimit.OnErrorClosed, true)
	for i, want := range []bool{true, true, false} { // the share holds 2
		d, err := fb.Decide(ctx, []ratelimit.Item{open, shadowClosed, local})
		if err != nil || !errors.Is(d.Failure, ratelimit.ErrUnavailable) || d.Unavailable {
			t.Fatalf("call %d: %+v, %v; want a fallback decision", i, d, err)
		}
		if d.Allowed != want || len(d.Results) != 3 {
			t.Fatalf("call %d: allowed %v (%d results), want %v", i, d.Allowed, len(d.Results), want)
		}
		if r := d.Results[0]; !r.Allowed || r.Fallback != ratelimit.OnErrorOpen {
			t.Errorf("call %d: open item %+v", i, r)
		}
		if r := d.Results[1]; !r.Allowed || r.Fallback != ratelimit.OnErrorClosed {
			t.Errorf("call %d: shadow closed item %+v, want allowed", i, r)
		}
		if r := d.Results[2]; r.Allowed != want || r.Fallback != ratelimit.OnErrorLocal || r.Limit != 2 {
			t.Errorf("call %d: local item %+v, want allowed=%v on a share of 2", i, r, want)
		}
		if !want && d.RetryAfter <= 0 {
			t.Errorf("call %d: denied without RetryAfter", i)
		}
	}

	d, err = fb.Decide(ctx, []ratelimit.Item{open, fbItem("c", ratelimit.OnErrorClosed, false), local})
	if err != nil || !d.Unavailable || d.Allowed || d.RetryAfter != 3*time.Second {
		t.Fatalf("closed item: %+v, %v; want unavailable with RetryAfter 3s", d, err)
	}
	if r := d.Results[2]; r.Fallback != ratelimit.OnErrorLocal || !r.Allowed {
		t.Errorf("closed batch decided the local item anyway: %+v", r)
	}

	// An item without a mode gets the store's error back.
	if _, err := fb.Decide(ctx, []ratelimit.Item{open, fbItem("z", 0, false)}); !errors.Is(err, errDown) {
		t.Errorf("item without a mode: err %v, want the store's", err)
	}

	// An item the local store refuses is let through as open.
	bad := fbItem("b", ratelimit.OnErrorLocal, false)
	bad.Limit.Per = 0
	d, err = fb.Decide(ctx, []ratelimit.Item{bad})
	if err != nil || !d.Allowed || d.Results[0].Fallback != ratelimit.OnErrorOpen {
		t.Errorf("invalid share: %+v, %v; want allowed as open", d, err)
	}
}

// TestStackHealth: a Stack reports its breaker's state and whether every
// domain is open; without a breaker it is always healthy.
func TestStackHealth(t *testing.T) {
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	inner := &flakyStore{}
	br := stack.NewBreaker(inner, stack.BreakerOptions{Failures: 1, Cooldown: 5 * time.Second, Now: clock.Now})
	s := stack.New(br, stack.Options{Breaker: br, Now: clock.Now})
	defer s.Close()
	if h := s.Health(); h.Breaker != stack.BreakerClosed || h.AllDown {
		t.Fatalf("fresh stack: %+v", h)
	}
	inner.set(errDown)
	d, err := s.Decide(context.Background(), []ratelimit.Item{fbItem("c", ratelimit.OnErrorClosed, false)})
	if err != nil || !d.Unavailable || d.RetryAfter != 5*time.Second {
		t.Fatalf("failing store: %+v, %v; want unavailable for the cooldown", d, err)
	}
	if h := s.Health(); h.Breaker != stack.BreakerOpen || !h.AllDown {
		t.Errorf("after a failure with Failures 1: %+v, want open and all down", h)
	}
	if err := s.Ping(context.Background()); err != nil {
		t.Errorf("Ping without a ping function: %v", err)
	}

	mem := stack.New(nil, stack.Options{Now: clock.Now})
	defer mem.Close()
	if h := mem.Health(); h != (stack.Health{}) {
		t.Errorf("memory stack health %+v", h)
	}
	d, err = mem.Decide(context.Background(), []ratelimit.Item{fbItem("m", ratelimit.OnErrorClosed, false)})
	if err != nil || !d.Allowed || d.Failure != nil {
		t.Errorf("memory stack: %+v, %v", d, err)
	}
}

// TestFallbackShareFollowsFleet: with a Fleet function, each fallback
// decision divides the limit by the fleet's size at that moment, so the
// shares follow the fleet as it grows and shrinks.
func TestFallbackShareFollowsFleet(t *testing.T) {
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	inner := &flakyStore{}
	inner.set(errDown)
	var size atomic.Int64
	fb := stack.NewFallback(inner, stack.FallbackOptions{Now: clock.Now, FleetSize: 50, Fleet: size.Load})
	defer fb.Close()
	for _, tc := range []struct {
		fleet, share int64
	}{{1, 100}, {4, 25}, {3, 34}, {0, 100}} { // 0 counts as 1
		size.Store(tc.fleet)
		d, err := fb.Decide(context.Background(), []ratelimit.Item{fbItem(fmt.Sprint("k", tc.fleet), ratelimit.OnErrorLocal, false)})
		if err != nil || !d.Allowed {
			t.Fatalf("fleet %d: %+v, %v", tc.fleet, d, err)
		}
		if r := d.Results[0]; r.Limit != tc.share || r.Fallback != ratelimit.OnErrorLocal {
			t.Errorf("fleet %d: local share %+v, want a burst of %d", tc.fleet, r, tc.share)
		}
	}
}
