package redisstore

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
)

// nodeID returns the Cluster node id of srv.
func nodeID(t *testing.T, srv *redistest.Server) string {
	t.Helper()
	id, _ := srv.MustDo(t, "CLUSTER", "MYID").(string)
	if id == "" {
		t.Fatalf("%s: no node id", srv.Addr)
	}
	return id
}

// TestMergedCallRefusedTogether: a merged call that the server refuses
// for the keys it carries together, before anything runs, gives each of
// its decisions what it would get alone: while a slot migrates (ASK or
// TRYAGAIN), the decision on a key the source still holds is decided and
// the one on a key it no longer holds fails with the redirection (the
// client follows none); on a server that requires one slot per call
// (CROSSSLOT; here a Cluster node reached as one server, as through a
// proxy that enforces it), decisions of different slots are decided.
func TestMergedCallRefusedTogether(t *testing.T) {
	c := redistest.StartCluster(t, 2)
	bucket := func(key string) []ratelimit.Item {
		return []ratelimit.Item{{Key: key, Algorithm: ratelimit.TokenBucket, Limit: ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 10}, Cost: 1}}
	}
	decided := func(t *testing.T, what string, v any, err error, items []ratelimit.Item, remaining int64) {
		t.Helper()
		if err != nil {
			t.Errorf("decision %s: %v, want it decided as alone", what, err)
			return
		}
		var res [1]ratelimit.Result
		var ext [1]itemReply
		ok, perr := parseReply(v, items, []int{0}, res[:], ext[:], false)
		if perr != nil || !ok || res[0].Remaining != remaining {
			t.Errorf("decision %s: admitted %v, %+v, %v; want admitted with %d remaining", what, ok, res[0], perr, remaining)
		}
	}

	t.Run("migrating slot", func(t *testing.T) {
		p := redistest.KeyPrefix(t)
		here, gone := p+"{mig}here", p+"{mig}gone"
		slot := redistest.Slot(here)
		src := c.PrimaryForSlot(slot)
		dst := c.Nodes()[0]
		if dst == src {
			dst = c.Nodes()[1]
		}
		s := mergeStore(t, c.Addrs(), 16)
		// here holds state (9 left); gone is absent, as a full bucket is.
		if _, errs := s.sendDecisions([]mergeDecision{{items: bucket(here), mode: modeDecide, merge: true}}, 0); errs[0] != nil {
			t.Fatal(errs[0])
		}
		slotText := strconv.Itoa(slot)
		dst.MustDo(t, "CLUSTER", "SETSLOT", slotText, "IMPORTING", nodeID(t, src))
		src.MustDo(t, "CLUSTER", "SETSLOT", slotText, "MIGRATING", nodeID(t, dst))
		defer func() {
			for _, n := range []*redistest.Server{src, dst} {
				n.MustDo(t, "CLUSTER", "SETSLOT", slotText, "STABLE")
			}
		}()
		vals, errs := s.sendDecisions([]mergeDecision{
			{items: bucket(here), mode: modeDecide, merge: true},
			{items: bucket(gone), mode: modeDecide, merge: true},
		}, 0)
		decided(t, "on the key the source holds", vals[0], errs[0], bucket(here), 8)
		if errs[1] == nil || !strings.HasPrefix(errs[1].Error(), "ASK ") {
			t.Errorf("decision on the key the source lacks: %v, %v; want the ASK redirection", vals[1], errs[1])
		}
	})

	t.Run("one slot per call", func(t *testing.T) {
		p := redistest.KeyPrefix(t)
		node := c.Nodes()[0]
		// Two keys of different slots, both on node.
		var keys []string
		for k := 0; len(keys) < 2; k++ {
			key := fmt.Sprintf("%s{x%d}k", p, k)
			if c.PrimaryForKey(key) == node && (len(keys) == 0 || redistest.Slot(key) != redistest.Slot(keys[0])) {
				keys = append(keys, key)
			}
		}
		s := mergeStore(t, []string{node.Addr}, 16)
		if by := mergeBy(s.run.mergeBy.Load()); by != mergeAll {
			t.Fatalf("a client of one address merges by %d, want %d (any calls)", by, mergeAll)
		}
		for round := range 2 {
			before := rejectedEvalsha(t, node)
			vals, errs := s.sendDecisions([]mergeDecision{
				{items: bucket(keys[0]), mode: modeDecide, merge: true},
				{items: bucket(keys[1]), mode: modeDecide, merge: true},
			}, 0)
			for k, key := range keys {
				decided(t, key, vals[k], errs[k], bucket(key), int64(9-round))
			}
			// The merged call is refused once; the store then merges
			// only calls of one slot.
			if n, want := rejectedEvalsha(t, node)-before, int64(1-round); n != want {
				t.Errorf("round %d: %d script calls refused, want %d", round, n, want)
			}
		}
	})
}

// rejectedEvalsha returns the EVALSHA commands srv refused before running
// them (CROSSSLOT, TRYAGAIN, ASK...).
func rejectedEvalsha(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	info, _ := srv.MustDo(t, "INFO", "commandstats").(string)
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:"); ok {
			for _, f := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(f, "rejected_calls="); ok {
					n, err := strconv.ParseInt(v, 10, 64)
					if err != nil {
						t.Fatalf("commandstats line %q: %v", line, err)
					}
					return n
				}
			}
		}
	}
	return 0
}
