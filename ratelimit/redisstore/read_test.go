package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// TestOpenReadsNeverOpenTheBreaker runs on a real Redis frozen with
// SIGSTOP, so that every call to it ends at the store's deadline: ten
// reads (stack.Stack.Read) time out, more than the three failures that open the
// breaker, and leave it closed, so that the first decision after Redis is
// back is decided by Redis (it used to find the breaker open: the reads
// of the quota endpoint went through the decisions' breaker). Then three
// decisions time out and open it, and reads are refused at once, with no
// script call, until a decision's probe has closed it again.
func TestOpenReadsNeverOpenTheBreaker(t *testing.T) {
	srv := redistest.StartStandalone(t)
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	h := &breakerAtCalls{}
	s := redisstore.Open(redisstore.WithBreakerClock(redisstore.Config{
		Addrs: []string{srv.Addr}, Timeout: 250 * time.Millisecond, BreakerFailures: 3, BreakerCooldown: time.Minute,
		FleetStatic: true, FleetSize: 1, Hook: h,
	}, clock.Now))
	t.Cleanup(func() { _ = s.Close() })
	h.stack.Store(s)
	ctx := context.Background()
	prefix := redistest.KeyPrefix(t)
	spend := tb(prefix+"{rd}k", 1, 1_000_000, time.Hour, 1)
	spend.OnError = ratelimit.OnErrorClosed
	read := spend
	read.Cost, read.Shadow = 0, true
	decide := func() ratelimit.Decision {
		t.Helper()
		d, err := s.Decide(ctx, []ratelimit.Item{spend})
		if err != nil {
			t.Fatalf("Decide: %v", err)
		}
		return d
	}
	if d := decide(); d.Failure != nil { // loads the script; Redis answers
		proctest.FatalOverrun(t, "first decision on a live Redis: %v", d.Failure)
	}
	if d, err := s.Read(ctx, []ratelimit.Item{read}); err != nil || d.Results[0].Remaining != 999_999 {
		t.Fatalf("read on a live Redis: %+v %v, want 999999 remaining", d, err)
	}
	h.take()

	srv.Pause()
	defer srv.Resume()
	for i := range 10 {
		_, err := s.Read(ctx, []ratelimit.Item{read})
		if !errors.Is(err, ratelimit.ErrUnavailable) || errors.Is(err, ratelimit.ErrBreakerOpen) {
			t.Fatalf("read %d on a frozen Redis: %v, want the store's failure", i, err)
		}
	}
	if st := s.Health().Breaker; st != stack.BreakerClosed {
		t.Fatalf("after 10 failed reads the breaker is %v, want closed", st)
	}
	if n := len(h.take()); n != 10 {
		t.Fatalf("%d script calls for 10 reads, want 10", n)
	}
	srv.Resume()
	if d := decide(); d.Failure != nil || d.Unavailable {
		if errors.Is(d.Failure, ratelimit.ErrBreakerOpen) {
			t.Fatalf("the first decision after the reads: refused by the breaker (%v)", d.Failure)
		}
		proctest.FatalOverrun(t, "first decision after Resume: %v", d.Failure)
	}

	srv.Pause()
	for range 3 {
		if d := decide(); !d.Unavailable {
			t.Fatalf("decision on a frozen Redis: %+v, want unavailable (closed)", d)
		}
	}
	if st := s.Health().Breaker; st != stack.BreakerOpen {
		t.Fatalf("after 3 failed decisions: %v, want open", st)
	}
	srv.Resume()
	h.take()
	for range 20 {
		if _, err := s.Read(ctx, []ratelimit.Item{read}); !errors.Is(err, ratelimit.ErrBreakerOpen) {
			t.Fatalf("read on the open breaker: %v, want refused", err)
		}
	}
	clock.Add(time.Minute) // half-open: reads still wait for a decision's probe
	if _, err := s.Read(ctx, []ratelimit.Item{read}); !errors.Is(err, ratelimit.ErrBreakerOpen) {
		t.Fatalf("read on the half-open breaker: %v, want refused", err)
	}
	if n := len(h.take()); n != 0 {
		t.Fatalf("%d script calls from reads refused by the breaker, want 0", n)
	}
	if d := decide(); d.Failure != nil {
		proctest.FatalOverrun(t, "probe after Resume: %v", d.Failure)
	}
	// Spent: the two decided, the probe, and any of the three timed-out
	// ones that Redis ran once resumed (their outcome is unknown).
	if d, err := s.Read(ctx, []ratelimit.Item{read}); err != nil || d.Results[0].Remaining > 999_997 || d.Results[0].Remaining < 999_994 {
		t.Fatalf("read after the probe: %+v %v, want 999994 to 999997 remaining", d, err)
	}
}
