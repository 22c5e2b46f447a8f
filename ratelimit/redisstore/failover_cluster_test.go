package redisstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/stack"
)

// TestOpenClusterFailoverDropsGonePrimary: after a real Cluster failover
// (a primary killed, its replica promoted), the breaker of the primary
// that is gone leaves the stack's domains once decisions reach the new
// primary, so the breaker state (quotagate_store_breaker_state, the
// console's table, readiness) no longer reports it until a restart; the
// new primary's domain is closed. A primary that is dead but still owns
// its slots keeps its open breaker.
func TestOpenClusterFailoverDropsGonePrimary(t *testing.T) {
	c := redistest.StartClusterWithReplicas(t, 3)
	const cooldown = time.Minute
	s, now := openClusterClocked(t, c, cooldown)
	items := itemPerPrimary(t, c)
	for _, it := range items {
		if err := failureOpen(t, s, it); err != nil {
			proctest.FatalOverrun(t, "decision on the healthy Cluster: %v", err)
		}
	}
	old := c.Nodes()[0].Addr
	promoted := c.Failover(t, 0)

	// Decide on the failed-over range until a decision reaches the new
	// primary: the first ones may still go to the old one (the client's
	// slot map is stale) and open its breaker; each later one is the
	// probe after a cooldown.
	deadline := time.Now().Add(10 * time.Second)
	for failureOpen(t, s, items[0]) != nil {
		if time.Now().After(deadline) {
			proctest.FatalOverrun(t, "no decision reached %s, promoted, within 10s (domains %v)", promoted.Addr, s.BreakerStates())
		}
		now.Add(int64(cooldown))
	}
	states := s.BreakerStates()
	if st, ok := states[old]; ok {
		t.Errorf("domains %v after the failover: %s, no longer a primary, still listed (%v)", states, old, st)
	}
	if st, ok := states[promoted.Addr]; !ok || st != stack.BreakerClosed {
		t.Errorf("domains %v after the failover: the new primary %s is %v (listed %v), want closed", states, promoted.Addr, st, ok)
	}
	if h := s.Health(); h.Breaker != stack.BreakerClosed || h.AllDown {
		t.Errorf("health %+v with every primary answering (domains %v), want closed", h, states)
	}

	// A dead primary that still owns its slots (its replica does not take
	// over) keeps its open breaker.
	c.Replica(1).MustDo(t, "CONFIG", "SET", "cluster-replica-no-failover", "yes")
	dead := c.Nodes()[1]
	dead.Kill()
	if err := failureOpen(t, s, items[1]); err == nil {
		t.Fatalf("decision on the dead %s succeeded", dead.Addr)
	}
	if st := s.BreakerStates()[dead.Addr]; st != stack.BreakerOpen {
		t.Errorf("domains %v: the dead primary %s is %v, want open", s.BreakerStates(), dead.Addr, st)
	}
	if h := s.Health(); h.Breaker != stack.BreakerOpen {
		t.Errorf("health %+v with a dead primary's breaker open, want open", h)
	}
}

// openClusterClocked opens a store on c whose breaker opens at the first
// failure, stays open for cooldown and reads the returned clock (ns since
// the epoch, starting now), with a static fleet of one.
func openClusterClocked(t *testing.T, c *redistest.Cluster, cooldown time.Duration) (*stack.Stack, *atomic.Int64) {
	t.Helper()
	now := new(atomic.Int64)
	now.Store(time.Now().UnixNano())
	s := redisstore.Open(redisstore.WithBreakerClock(redisstore.Config{Addrs: c.Addrs(), Timeout: 250 * time.Millisecond,
		BreakerFailures: 1, BreakerCooldown: cooldown, FleetStatic: true, FleetSize: 1},
		func() time.Time { return time.Unix(0, now.Load()) }))
	t.Cleanup(func() { _ = s.Close() })
	return s, now
}

// itemPerPrimary returns, for each node of c (a primary) in order, a
// token-bucket item that fails open whose key it owns.
func itemPerPrimary(t *testing.T, c *redistest.Cluster) []ratelimit.Item {
	prefix := redistest.KeyPrefix(t)
	items := make([]ratelimit.Item, len(c.Nodes()))
	for i, n := range c.Nodes() {
		for j := 0; ; j++ {
			if k := fmt.Sprintf("%s{fo%d}k", prefix, j); c.PrimaryForKey(k) == n {
				items[i] = tb(k, 1, 1000, time.Hour, 1)
				items[i].OnError = ratelimit.OnErrorOpen
				break
			}
		}
	}
	return items
}
