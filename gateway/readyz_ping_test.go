package gateway

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/stack"
)

// probeTimeout is how long a Kubernetes probe waits by default.
const probeTimeout = time.Second

// TestStoreDownPingBoundedBelowProbe: the PING of /readyz ends before a
// default Kubernetes probe gives up (1 s), so that a Redis that never
// answers costs /readyz less than the probe's timeout and the answer
// (200 "degraded" without a closed policy) reaches the probe. It used to
// be given a full second. The PING here never answers: it waits for its
// deadline and records it, so nothing is timed but the deadline set.
func TestStoreDownPingBoundedBelowProbe(t *testing.T) {
	var deadline time.Time
	var had bool
	store := stack.New(nil, stack.Options{Ping: func(ctx context.Context) error {
		deadline, had = ctx.Deadline()
		<-ctx.Done()
		return errors.Join(ratelimit.ErrUnavailable, ctx.Err())
	}})
	t.Cleanup(func() { _ = store.Close() })
	before := time.Now()
	if got := storeDown(context.Background(), store); got != "store unreachable" {
		t.Errorf("storeDown with a PING that never answers = %q, want store unreachable", got)
	}
	if !had {
		t.Fatal("the PING of /readyz has no deadline")
	}
	if d := deadline.Sub(before); d >= probeTimeout {
		t.Errorf("the PING of /readyz may take %v, not below a probe's default timeout of %v", d, probeTimeout)
	}
}
