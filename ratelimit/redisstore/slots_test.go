package redisstore_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/memstore"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// renewSlot is a concurrency item of key for holder, held 30 s.
func renewSlot(key, holder string) ratelimit.Item {
	return ratelimit.Item{Key: key, Algorithm: ratelimit.Concurrency,
		Limit: ratelimit.Limit{Max: 10, Per: 30 * time.Second}, Cost: 1, Holder: holder}
}

// scriptCalls is the number of script calls the servers have run so far
// (INFO commandstats).
func scriptCalls(t *testing.T, srvs ...*redistest.Server) int64 {
	t.Helper()
	var n int64
	for _, srv := range srvs {
		_, scripts, _ := commandCalls(t, srv)
		n += scripts
	}
	return n
}

// TestRedisRenewBatchesOnePrimary: on a single primary a renewal round of
// 300 slots of 300 tenants is ⌈300/64⌉ = 5 script calls, not 300; it
// extends every held slot to Per from the store's now, and reports exactly
// the slots no longer held (a deleted key, a removed holder, expired
// slots) as lost, by index; their capacity is free.
func TestRedisRenewBatchesOnePrimary(t *testing.T) {
	srv := redistest.StartStandalone(t)
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	s := newRedisStore(t, []string{srv.Addr}, clock.Now, 5*time.Second)
	prefix := redistest.KeyPrefix(t)
	ctx := context.Background()
	const n = 300
	held := make([]ratelimit.Item, n)
	for i := range held {
		held[i] = renewSlot(prefix+"{t"+strconv.Itoa(i)+"}:inflight", "h"+strconv.Itoa(i))
		mustDecide(t, s, held[i])
	}
	clock.Add(15 * time.Second)
	before := scriptCalls(t, srv)
	lost, err := s.Renew(ctx, held)
	if err != nil || len(lost) != 0 {
		t.Fatalf("first round: lost %v, err %v; want none", lost, err)
	}
	if got := scriptCalls(t, srv) - before; got != 5 {
		t.Errorf("a round of %d slots took %d script calls, want 5", len(held), got)
	}
	want := strconv.FormatInt(clock.Now().Add(30*time.Second).UnixMicro(), 10)
	for _, i := range []int{0, 63, 64, n - 1} {
		if sc := srv.MustDo(t, "ZSCORE", held[i].Key, held[i].Holder); sc != want {
			t.Errorf("slot %d expires at %v after the renewal, want %s", i, sc, want)
		}
	}

	// Slots 5 and 200 go and others fill their keys: they are lost. Slot
	// 6 goes with room: it is taken back. Slot 7's key now holds a string:
	// lost, and the string stays.
	srv.MustDo(t, "DEL", held[5].Key)
	srv.MustDo(t, "ZREM", held[200].Key, held[200].Holder)
	fillSlots(t, srv, held[5].Key, clock.Now().Add(time.Hour))
	fillSlots(t, srv, held[200].Key, clock.Now().Add(time.Hour))
	srv.MustDo(t, "DEL", held[6].Key)
	srv.MustDo(t, "SET", held[7].Key, "x")
	clock.Add(16 * time.Second)
	if lost, err := s.Renew(ctx, held); err != nil || !slices.Equal(lost, []int{5, 7, 200}) {
		t.Errorf("after deleting slots 5, 6, 7 and 200: lost %v, err %v; want [5 7 200]", lost, err)
	}
	want = strconv.FormatInt(clock.Now().Add(30*time.Second).UnixMicro(), 10)
	if sc := srv.MustDo(t, "ZSCORE", held[6].Key, held[6].Holder); sc != want {
		t.Errorf("slot 6 taken back to expire at %v, want %s", sc, want)
	}
	if ttl, _ := srv.MustDo(t, "PTTL", held[6].Key).(int64); ttl < 29_000 {
		t.Errorf("slot 6's key taken back with a PTTL of %d ms, want about 30 s", ttl)
	}
	if v := srv.MustDo(t, "GET", held[7].Key); v != "x" {
		t.Errorf("the string under slot 7's key is %v after the renewal, want x", v)
	}
	clock.Add(31 * time.Second) // everything expired: taken back, with room
	lost, err = s.Renew(ctx, held[:3])
	if err != nil || len(lost) != 0 {
		t.Errorf("after expiry: lost %v, err %v; want none", lost, err)
	}
	if d := mustDecide(t, s, renewSlot(held[0].Key, "next")); !d.Allowed || d.Results[0].Remaining != 8 {
		t.Errorf("a slot taken back is not counted: %+v", d)
	}
}

// fillSlots fills key with renewSlot's Max members of other holders,
// expiring at until.
func fillSlots(t *testing.T, srv *redistest.Server, key string, until time.Time) {
	t.Helper()
	for i := range renewSlot("", "").Limit.Max {
		srv.MustDo(t, "ZADD", key, strconv.FormatInt(until.UnixMicro(), 10), "other"+strconv.FormatInt(i, 10))
	}
}

// TestRedisRenewBatchesCluster: on a Cluster a renewal round is one script
// call per hash slot, even for keys of different hash tags that share a
// slot, and the calls reach every primary (one pipeline per node).
func TestRedisRenewBatchesCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	s := newRedisStore(t, c.Addrs(), nil, 5*time.Second)
	prefix := redistest.KeyPrefix(t)
	ctx := context.Background()
	var held []ratelimit.Item
	slots := map[int]bool{}
	add := func(tag, holder string) {
		it := renewSlot(prefix+"{"+tag+"}:inflight", holder)
		mustDecide(t, s, it)
		held = append(held, it)
		slots[redistest.Slot(it.Key)] = true
	}
	for i := range 40 {
		add("t"+strconv.Itoa(i), "a")
		add("t"+strconv.Itoa(i), "b") // the same key: the same call
	}
	// Another tag in t0's slot.
	twin := ""
	for i := 0; twin == ""; i++ {
		if tag := "x" + strconv.Itoa(i); redistest.Slot("{"+tag+"}") == redistest.Slot("{t0}") {
			twin = tag
		}
	}
	add(twin, "c")
	before := scriptCalls(t, c.Nodes()...)
	if lost, err := s.Renew(ctx, held); err != nil || len(lost) != 0 {
		t.Fatalf("lost %v, err %v; want none", lost, err)
	}
	if got, want := scriptCalls(t, c.Nodes()...)-before, int64(len(slots)); got != want {
		t.Errorf("a round of %d slots in %d hash slots took %d script calls, want %d", len(held), want, got, want)
	}
	// A deleted slot whose key others filled is reported on the node that
	// owns it.
	last := held[len(held)-1]
	c.PrimaryForKey(last.Key).MustDo(t, "DEL", last.Key)
	fillSlots(t, c.PrimaryForKey(last.Key), last.Key, time.Now().Add(time.Hour))
	if lost, err := s.Renew(ctx, held); err != nil || !slices.Equal(lost, []int{len(held) - 1}) {
		t.Errorf("after deleting the last slot: lost %v, err %v; want [%d]", lost, err, len(held)-1)
	}
}

// TestRedisReleaseBatchesOnePrimary: releases of 100 slots of 100 tenants
// sent together are ⌈100/64⌉ = 2 script calls on a single primary, and
// each slot costs its script two commands (the key's type and the
// holder's removal): the live slots are not counted to release one.
func TestRedisReleaseBatchesOnePrimary(t *testing.T) {
	srv := redistest.StartStandalone(t)
	s := newRedisStore(t, []string{srv.Addr}, nil, 5*time.Second)
	prefix := redistest.KeyPrefix(t)
	held := make([]ratelimit.Item, 100)
	for i := range held {
		held[i] = renewSlot(prefix+"{t"+strconv.Itoa(i)+"}:inflight", "h")
		mustDecide(t, s, held[i])
	}
	total0, scripts0, _ := commandCalls(t, srv)
	if err := s.Release(context.Background(), held); err != nil {
		t.Fatal(err)
	}
	total1, scripts1, _ := commandCalls(t, srv)
	// Per call the call itself (FCALL or EVALSHA) and TIME; per slot TYPE
	// and ZREM.
	if scripts, cmds := scripts1-scripts0, total1-total0; scripts != 2 || cmds != 2*2+100*2 {
		t.Errorf("releasing 100 slots: %d script calls, %d commands; want 2 and 204", scripts, cmds)
	}
	if n := srv.MustDo(t, "EXISTS", held[0].Key, held[99].Key); n != int64(0) {
		t.Errorf("%v released keys still exist", n)
	}
}

// TestRedisSlotDenialRetryAfterCountsStoredAndTaken: a batch that takes a
// slot of a key and is then denied a second slot of it reports, as the
// memory store does, the time until the earliest live slot expires, whether
// that slot was stored before the call or taken in it.
func TestRedisSlotDenialRetryAfterCountsStoredAndTaken(t *testing.T) {
	srv := redistest.StartStandalone(t)
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	prefix := redistest.KeyPrefix(t)
	mem := memstore.New(memstore.Options{Now: clock.Now})
	t.Cleanup(func() { _ = mem.Close() })
	stores := map[string]ratelimit.Store{"redis": newRedisStore(t, []string{srv.Addr}, clock.Now, 5*time.Second), "memory": mem}
	slot := func(name, holder string, per time.Duration) ratelimit.Item {
		return ratelimit.Item{Key: prefix + "{t}:" + name, Algorithm: ratelimit.Concurrency,
			Limit: ratelimit.Limit{Max: 2, Per: per}, Cost: 1, Holder: holder}
	}
	got := map[string][]time.Duration{}
	for _, name := range []string{"redis", "memory"} {
		s := stores[name]
		clock.Set(time.Unix(1_700_000_000, 0))
		mustDecide(t, s, slot(name+"-stored", "a", 30*time.Second)) // expires at +30 s
		mustDecide(t, s, slot(name+"-taken", "a", 60*time.Second))  // expires at +60 s
		clock.Add(10 * time.Second)
		// The stored slot expires first: at +30 s, 20 s from now.
		d := mustDecide(t, s, slot(name+"-stored", "b", 60*time.Second), slot(name+"-stored", "c", 60*time.Second))
		// The slot taken in the call expires first: b's at +15 s, 5 s from now.
		e := mustDecide(t, s, slot(name+"-taken", "b", 5*time.Second), slot(name+"-taken", "c", 5*time.Second))
		if d.Allowed || e.Allowed {
			t.Fatalf("%s: a third slot of max 2 was admitted: %+v %+v", name, d, e)
		}
		got[name] = []time.Duration{d.Results[1].RetryAfter, e.Results[1].RetryAfter}
	}
	if want := []time.Duration{20 * time.Second, 5 * time.Second}; !slices.Equal(got["redis"], want) || !slices.Equal(got["memory"], want) {
		t.Errorf("Retry-After of the denied slot: redis %v, memory %v; want %v", got["redis"], got["memory"], want)
	}
}
