package slotkeeper_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/memstore"
	"github.com/quotagate/quotagate/ratelimit/slotkeeper"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// TestSlotKeeperRenewsUntilRelease: a held slot outlives its Per while it is
// renewed, and a release frees it and reports the released items.
func TestSlotKeeperRenewsUntilRelease(t *testing.T) {
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	store := memstore.New(memstore.Options{Now: clock.Now})
	defer store.Close()
	released := make(chan []ratelimit.Item, 1)
	k := slotkeeper.New(slotkeeper.Options{Released: func(items []ratelimit.Item) { released <- items }})
	defer k.Close()
	ctx := context.Background()

	it := storetest.SlotItem("{t}s", "h1", 1, ratelimit.OnErrorOpen) // Per 30s
	if d, err := store.Decide(ctx, []ratelimit.Item{it}); err != nil || !d.Allowed {
		t.Fatalf("take: %+v, %v", d, err)
	}
	h := k.Hold(store, []ratelimit.Item{it}, false, nil)
	if k.Len() != 1 {
		t.Fatalf("Len = %d, want 1", k.Len())
	}
	other := storetest.SlotItem("{t}s", "h2", 1, ratelimit.OnErrorOpen)
	for range 4 { // 80 s in steps of 20 s, each followed by a renewal
		clock.Add(20 * time.Second)
		if err := k.RenewAll(ctx); err != nil {
			t.Fatal(err)
		}
		if d, _ := store.Decide(ctx, []ratelimit.Item{other}); d.Allowed {
			t.Fatalf("at %v: another request took the renewed slot", clock.Now())
		}
	}
	h.Release()
	h.Release() // a second release does nothing
	select {
	case items := <-released:
		if len(items) != 1 || items[0].Holder != "h1" {
			t.Errorf("released %+v", items)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("missed deadline: the release was not reported within 10 s")
	}
	if d, _ := store.Decide(ctx, []ratelimit.Item{other}); !d.Allowed {
		t.Error("the released slot was not free")
	}
	if k.Len() != 0 {
		t.Errorf("Len = %d after release, want 0", k.Len())
	}
}

// TestSlotKeeperUnrenewedSlotExpires: without renewal (an instance that
// died), the slot is free after its Per.
func TestSlotKeeperUnrenewedSlotExpires(t *testing.T) {
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	store := memstore.New(memstore.Options{Now: clock.Now})
	defer store.Close()
	ctx := context.Background()
	it := storetest.SlotItem("{t}s", "h1", 1, ratelimit.OnErrorOpen)
	if d, _ := store.Decide(ctx, []ratelimit.Item{it}); !d.Allowed {
		t.Fatal("take denied")
	}
	clock.Add(30 * time.Second)
	if d, _ := store.Decide(ctx, []ratelimit.Item{storetest.SlotItem("{t}s", "h2", 1, ratelimit.OnErrorOpen)}); !d.Allowed {
		t.Error("an unrenewed slot was still held after its Per")
	}
}

// countingSlots counts the items each Renew is given.
type countingSlots struct {
	ratelimit.Slots
	renewed []int
}

func (c *countingSlots) Renew(ctx context.Context, items []ratelimit.Item) ([]int, error) {
	c.renewed = append(c.renewed, len(items))
	return c.Slots.Renew(ctx, items)
}

// TestSlotKeeperReportsLostSlotsOnce: a renewal that finds a held slot gone
// reports it once, with its owner and index, then stops renewing it, and
// the request's release frees only the slots it still holds.
func TestSlotKeeperReportsLostSlotsOnce(t *testing.T) {
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	store := memstore.New(memstore.Options{Now: clock.Now})
	defer store.Close()
	var lost [][]slotkeeper.LostSlot
	released := make(chan []ratelimit.Item, 1)
	k := slotkeeper.New(slotkeeper.Options{
		Lost:     func(l []slotkeeper.LostSlot) { lost = append(lost, l) },
		Released: func(items []ratelimit.Item) { released <- items },
	})
	defer k.Close()
	ctx := context.Background()

	a1, a2 := storetest.SlotItem("{a}s", "a1", 5, ratelimit.OnErrorOpen), storetest.SlotItem("{a}t", "a2", 5, ratelimit.OnErrorOpen)
	b1 := storetest.SlotItem("{b}s", "b1", 5, ratelimit.OnErrorOpen)
	for _, it := range []ratelimit.Item{a1, a2, b1} {
		if d, err := store.Decide(ctx, []ratelimit.Item{it}); err != nil || !d.Allowed {
			t.Fatalf("take %s: %+v, %v", it.Holder, d, err)
		}
	}
	slots := &countingSlots{Slots: store}
	ha := k.Hold(slots, []ratelimit.Item{a1, a2}, true, "request a")
	k.Hold(slots, []ratelimit.Item{b1}, true, "request b")

	// a2's slot goes (as if deleted from the store) while its request
	// runs, and other requests fill its key, so that it cannot be taken
	// back.
	if err := store.Release(ctx, []ratelimit.Item{a2}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		it := storetest.SlotItem("{a}t", fmt.Sprintf("other%d", i), 5, ratelimit.OnErrorOpen)
		if d, err := store.Decide(ctx, []ratelimit.Item{it}); err != nil || !d.Allowed {
			t.Fatalf("fill: %+v, %v", d, err)
		}
	}
	for range 3 {
		clock.Add(20 * time.Second)
		if err := k.RenewAll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	want := []slotkeeper.LostSlot{{Owner: "request a", Index: 1, Item: a2}}
	if len(lost) != 1 || len(lost[0]) != 1 || lost[0][0].Owner != want[0].Owner || lost[0][0].Index != 1 || lost[0][0].Item.Holder != "a2" {
		t.Fatalf("Lost calls %+v, want one with %+v", lost, want)
	}
	if !slices.Equal(slots.renewed, []int{3, 2, 2}) {
		t.Errorf("items renewed per round %v, want [3 2 2] (the lost slot only once)", slots.renewed)
	}
	ha.Release()
	if items := <-released; len(items) != 1 || items[0].Holder != "a1" {
		t.Errorf("released %+v, want a1 alone", items)
	}
}

// gatedSlots holds each Release until the test lets it go, and records
// the holders of each.
type gatedSlots struct {
	ratelimit.Slots
	entered chan []string
	gate    chan struct{}
}

func (g *gatedSlots) Release(ctx context.Context, items []ratelimit.Item) error {
	var holders []string
	for _, it := range items {
		holders = append(holders, it.Holder)
	}
	g.entered <- holders
	<-g.gate
	return g.Slots.Release(ctx, items)
}

// TestSlotKeeperGathersReleases: a release goes to the store at once, and
// the releases that come while it is in flight go together in one call
// once it returns.
func TestSlotKeeperGathersReleases(t *testing.T) {
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	store := memstore.New(memstore.Options{Now: clock.Now})
	defer store.Close()
	k := slotkeeper.New(slotkeeper.Options{})
	defer k.Close()
	g := &gatedSlots{Slots: store, entered: make(chan []string, 4), gate: make(chan struct{})}
	var held []*slotkeeper.Held
	for _, h := range []string{"a", "b", "c", "d"} {
		it := storetest.SlotItem("{t}s", h, 5, ratelimit.OnErrorOpen)
		if d, err := store.Decide(context.Background(), []ratelimit.Item{it}); err != nil || !d.Allowed {
			t.Fatalf("take %s: %+v, %v", h, d, err)
		}
		held = append(held, k.Hold(g, []ratelimit.Item{it}, false, nil))
	}
	entered := func() []string {
		t.Helper()
		select {
		case h := <-g.entered:
			return h
		case <-time.After(10 * time.Second):
			t.Fatal("missed deadline: no release reached the store within 10 s")
			return nil
		}
	}
	held[0].Release()
	if h := entered(); !slices.Equal(h, []string{"a"}) {
		t.Fatalf("first call released %v, want [a]", h)
	}
	for _, h := range held[1:] {
		h.Release()
	}
	g.gate <- struct{}{}
	if h := entered(); !slices.Equal(h, []string{"b", "c", "d"}) {
		t.Errorf("second call released %v, want [b c d] together", h)
	}
	g.gate <- struct{}{}
	k.Wait()
	peek := storetest.SlotItem("{t}s", "", 5, ratelimit.OnErrorOpen)
	peek.Cost = 0
	if d, err := store.Decide(context.Background(), []ratelimit.Item{peek}); err != nil || d.Results[0].Remaining != 5 {
		t.Errorf("after the releases: %+v, %v; want 5 slots free", d, err)
	}
}

// releasingSlots runs before, once, as a renewal starts: after the
// Keeper gathered its items, before the store renews them.
type releasingSlots struct {
	ratelimit.Slots
	before func()
}

func (r *releasingSlots) Renew(ctx context.Context, items []ratelimit.Item) ([]int, error) {
	if f := r.before; f != nil {
		r.before = nil
		f()
	}
	return r.Slots.Renew(ctx, items)
}

// TestSlotKeeperReleaseDuringRenewal: a request that ends while a renewal
// of its slot is under way is released before the renewal reaches the
// store, which then takes the slot back (its key has room); the keeper
// releases it again, so that no slot outlives its request.
func TestSlotKeeperReleaseDuringRenewal(t *testing.T) {
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	store := memstore.New(memstore.Options{Now: clock.Now})
	defer store.Close()
	var lost [][]slotkeeper.LostSlot
	k := slotkeeper.New(slotkeeper.Options{Lost: func(l []slotkeeper.LostSlot) { lost = append(lost, l) }})
	defer k.Close()
	ctx := context.Background()
	a, b := storetest.SlotItem("{a}s", "a", 2, ratelimit.OnErrorOpen), storetest.SlotItem("{a}s", "b", 2, ratelimit.OnErrorOpen)
	for _, it := range []ratelimit.Item{a, b} {
		if d, err := store.Decide(ctx, []ratelimit.Item{it}); err != nil || !d.Allowed {
			t.Fatalf("take %s: %+v, %v", it.Holder, d, err)
		}
	}
	slots := &releasingSlots{Slots: store}
	ha := k.Hold(slots, []ratelimit.Item{a}, true, "request a")
	k.Hold(slots, []ratelimit.Item{b}, true, "request b")
	slots.before = ha.Release
	if err := k.RenewAll(ctx); err != nil {
		t.Fatal(err)
	}
	peek := a
	peek.Cost, peek.Holder = 0, ""
	if d, err := store.Decide(ctx, []ratelimit.Item{peek}); err != nil || d.Results[0].Remaining != 1 {
		t.Errorf("after the renewal: %+v, %v; want b's slot alone held", d, err)
	}
	if len(lost) != 0 {
		t.Errorf("Lost calls %+v, want none", lost)
	}
}

// TestSlotKeeperReportsRetakenSlots: a renewal that takes back a slot it
// found gone reports it (owner and index) as taken back, not lost, and
// keeps renewing it.
func TestSlotKeeperReportsRetakenSlots(t *testing.T) {
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	store := memstore.New(memstore.Options{Now: clock.Now})
	defer store.Close()
	var lost, retaken [][]slotkeeper.LostSlot
	k := slotkeeper.New(slotkeeper.Options{
		Lost:    func(l []slotkeeper.LostSlot) { lost = append(lost, l) },
		Retaken: func(r []slotkeeper.LostSlot) { retaken = append(retaken, r) },
	})
	defer k.Close()
	ctx := context.Background()
	a1, a2 := storetest.SlotItem("{a}s", "a1", 5, ratelimit.OnErrorOpen), storetest.SlotItem("{a}t", "a2", 5, ratelimit.OnErrorOpen)
	if d, err := store.Decide(ctx, []ratelimit.Item{a1, a2}); err != nil || !d.Allowed {
		t.Fatalf("take: %+v, %v", d, err)
	}
	slots := &countingSlots{Slots: store}
	k.Hold(slots, []ratelimit.Item{a1, a2}, true, "request a")
	if err := store.Release(ctx, []ratelimit.Item{a2}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		clock.Add(20 * time.Second)
		if err := k.RenewAll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// countingSlots hides RenewReport: nothing is reported taken back.
	if len(lost) != 0 || len(retaken) != 0 {
		t.Fatalf("through a plain Slots: Lost %+v, Retaken %+v; want neither", lost, retaken)
	}
	// Request b's slot is gone from the start (as if dropped by a
	// failover), in a key of its own.
	k.Hold(store, []ratelimit.Item{storetest.SlotItem("{b}s", "b1", 5, ratelimit.OnErrorOpen)}, true, "request b")
	clock.Add(20 * time.Second)
	if err := k.RenewAll(ctx); err != nil {
		t.Fatal(err)
	}
	if len(lost) != 0 || len(retaken) != 1 || len(retaken[0]) != 1 || retaken[0][0].Owner != "request b" || retaken[0][0].Index != 0 {
		t.Fatalf("Lost %+v, Retaken %+v; want request b's slot 0 taken back alone", lost, retaken)
	}
	if !slices.Equal(slots.renewed, []int{2, 2, 2}) {
		t.Errorf("items renewed per round through the plain Slots %v, want [2 2 2]", slots.renewed)
	}
}
