package redisstore_test

import (
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit/stack"
)

// TestOpenClusterOneDeadPrimaryNotAllDown: on a real Cluster of three
// primaries, when the only primary decisions have reached so far dies and
// its breaker opens, the store is not all down (readiness): the other two
// primaries of the slot map answer, and most keys would be decided. It
// used to read all down, as AllDown looked only at the primaries decided
// on. Once every primary's breaker is open, it is all down.
func TestOpenClusterOneDeadPrimaryNotAllDown(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	s, _ := openClusterClocked(t, c, time.Hour)
	items := itemPerPrimary(t, c)
	if err := failureOpen(t, s, items[0]); err != nil {
		proctest.FatalOverrun(t, "decision on the healthy Cluster: %v", err)
	}
	dead := c.Nodes()[0]
	dead.Kill()
	if err := failureOpen(t, s, items[0]); err == nil {
		t.Fatalf("decision on the dead %s succeeded", dead.Addr)
	}
	if st := s.BreakerStates()[dead.Addr]; st != stack.BreakerOpen {
		t.Fatalf("domains %v: the dead %s is %v, want open", s.BreakerStates(), dead.Addr, st)
	}
	if h := s.Health(); h.AllDown {
		t.Errorf("health %+v with one primary of three dead (domains %v): all down, want not", h, s.BreakerStates())
	}

	// The others die too; each decision opens its primary's breaker.
	for i, n := range c.Nodes()[1:] {
		n.Kill()
		if err := failureOpen(t, s, items[i+1]); err == nil {
			t.Fatalf("decision on the dead %s succeeded", n.Addr)
		}
	}
	if h := s.Health(); !h.AllDown {
		t.Errorf("health %+v with every primary dead and open (domains %v), want all down", h, s.BreakerStates())
	}
}
