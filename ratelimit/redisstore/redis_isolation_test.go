package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
)

// TestRedisStoreFrozenPrimaryHoldsUpNoOther freezes one primary of a
// Cluster (SIGSTOP: connections accepted, nothing answered) while callers
// wait on it with a long deadline, and checks that decisions for keys on the
// other primaries go on: every one of them is answered, although each has a
// deadline under a third of the frozen callers'. A queue, writer slot or
// connection pool shared between primaries would hold them behind the
// frozen calls until their deadline.
//
// A live decision that fails with its deadline on a busy machine is
// reported as a missed deadline; any other error fails the test.
func TestRedisStoreFrozenPrimaryHoldsUpNoOther(t *testing.T) {
	const (
		frozenWait = 2 * time.Second
		liveWait   = 600 * time.Millisecond
		nFrozen    = 8 // more than the writer slots of one primary's queue
		nLive      = 8
		liveCalls  = 20
	)
	c := redistest.StartCluster(t, 3)
	s := newRedisStore(t, c.Addrs(), nil, 0) // deadlines come from the callers
	prefix := redistest.KeyPrefix(t)
	frozen := c.Nodes()[0]
	var frozenItems, liveItems []ratelimit.Item
	for i := 0; len(frozenItems) < nFrozen || len(liveItems) < nLive; i++ {
		it := tb(fmt.Sprintf("%s{t%d}:k", prefix, i), 1000, 1000, time.Second, 1)
		if c.PrimaryForKey(it.Key) == frozen {
			frozenItems = append(frozenItems, it)
		} else {
			liveItems = append(liveItems, it)
		}
	}
	// Every key answers once (a Cluster just formed may refuse a first call).
	for _, it := range append(frozenItems[:nFrozen:nFrozen], liveItems[:nLive]...) {
		var err error
		for range 20 {
			if _, err = s.Decide(context.Background(), []ratelimit.Item{it}); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("%s never answered: %v", it.Key, err)
		}
	}

	frozen.Pause()
	defer frozen.Resume()
	var wg sync.WaitGroup
	frozenErrs := make([]error, nFrozen)
	for i := range nFrozen {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), frozenWait)
			defer cancel()
			_, frozenErrs[i] = s.Decide(ctx, []ratelimit.Item{frozenItems[i]})
		})
	}
	var mu sync.Mutex
	var late, wrong []string
	for i := range nLive {
		wg.Go(func() {
			for range liveCalls {
				ctx, cancel := context.WithTimeout(context.Background(), liveWait)
				start := time.Now()
				d, err := s.Decide(ctx, []ratelimit.Item{liveItems[i]})
				cancel()
				mu.Lock()
				switch {
				case errors.Is(err, context.DeadlineExceeded):
					late = append(late, fmt.Sprintf("%s after %v", liveItems[i].Key, time.Since(start).Round(time.Millisecond)))
				case err != nil:
					wrong = append(wrong, fmt.Sprintf("%s: %v", liveItems[i].Key, err))
				case !d.Allowed:
					wrong = append(wrong, fmt.Sprintf("%s denied with 1000 units a second", liveItems[i].Key))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for i, err := range frozenErrs {
		// Its deadline, or the client's 1 s socket read timeout before it.
		if !errors.Is(err, ratelimit.ErrUnavailable) {
			t.Errorf("decision %d on the frozen primary: %v, want ErrUnavailable", i, err)
		}
	}
	if len(wrong) > 0 {
		t.Errorf("%d of %d decisions on live primaries went wrong while one primary was frozen: %q", len(wrong), nLive*liveCalls, wrong)
	}
	if len(late) > 0 {
		proctest.Overrun(t, "%d of %d decisions on live primaries passed their %v deadline while one primary was frozen: %q",
			len(late), nLive*liveCalls, liveWait, late)
	}
}
