package redisstore_test

import (
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
)

// TestRedisSlotsAcrossClusterSlots: on a Cluster, a slot of a global
// concurrency policy (its own hash slot, decided first) is given back when
// the tenant's rate item, decided next, denies; and a slot the tenant's
// group refuses leaves the global rate item untouched. A request that one
// policy denies holds nothing of the others, across hash slots too.
func TestRedisSlotsAcrossClusterSlots(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	s := newRedisStore(t, c.Addrs(), nil, time.Second)
	prefix := redistest.KeyPrefix(t)
	slot := func(key, holder string) ratelimit.Item {
		return ratelimit.Item{Key: prefix + key, Algorithm: ratelimit.Concurrency,
			Limit: ratelimit.Limit{Max: 1, Per: time.Minute}, Cost: 1, Holder: holder}
	}
	peek := func(it ratelimit.Item) int64 {
		t.Helper()
		it.Cost, it.Holder = 0, ""
		return mustDecide(t, s, it).Results[0].Remaining
	}

	global, tenant := slot("{g}:inflight", "h1"), tb(prefix+"{t}:rate", 1, 1, time.Hour, 1)
	mustDecide(t, s, tenant) // spend the tenant's only unit
	if d := mustDecide(t, s, global, tenant); d.Allowed || !d.Results[0].Allowed || d.Results[1].Allowed {
		t.Fatalf("global slot free, tenant spent: %+v", d)
	}
	if r := peek(global); r != 1 {
		t.Errorf("the global slot of a denied request was not given back: %d free, want 1", r)
	}

	// The other way: the global rate item admits, the tenant's slot is full.
	grate := tb(prefix+"{g}:rate", 1, 5, time.Hour, 1)
	held := slot("{t}:inflight", "h2")
	mustDecide(t, s, held)
	if d := mustDecide(t, s, grate, slot("{t}:inflight", "h3")); d.Allowed || !d.Results[0].Allowed || d.Results[1].Allowed {
		t.Fatalf("global rate free, tenant slot full: %+v", d)
	}
	if r := mustDecide(t, s, ratelimit.Item{Key: grate.Key, Algorithm: grate.Algorithm, Limit: grate.Limit}).Results[0].Remaining; r != 5 {
		t.Errorf("the global rate item of a request the tenant's slot refused kept %d of 5, want 5 (refunded)", r)
	}
}
