package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// TestSlotKeeperRenewsUntilRelease: a held slot outlives its Per while it is
// renewed, and a release frees it and reports the released items.
func TestSlotKeeperRenewsUntilRelease(t *testing.T) {
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{Now: clock.Now})
	defer store.Close()
	released := make(chan []ratelimit.Item, 1)
	k := ratelimit.NewSlotKeeper(ratelimit.SlotKeeperOptions{Released: func(items []ratelimit.Item) { released <- items }})
	defer k.Close()
	ctx := context.Background()

	it := slotItem("{t}s", "h1", 1, ratelimit.OnErrorOpen) // Per 30s
	if d, err := store.Decide(ctx, []ratelimit.Item{it}); err != nil || !d.Allowed {
		t.Fatalf("take: %+v, %v", d, err)
	}
	h := k.Hold(store, []ratelimit.Item{it}, false)
	if k.Len() != 1 {
		t.Fatalf("Len = %d, want 1", k.Len())
	}
	other := slotItem("{t}s", "h2", 1, ratelimit.OnErrorOpen)
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
	store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{Now: clock.Now})
	defer store.Close()
	ctx := context.Background()
	it := slotItem("{t}s", "h1", 1, ratelimit.OnErrorOpen)
	if d, _ := store.Decide(ctx, []ratelimit.Item{it}); !d.Allowed {
		t.Fatal("take denied")
	}
	clock.Add(30 * time.Second)
	if d, _ := store.Decide(ctx, []ratelimit.Item{slotItem("{t}s", "h2", 1, ratelimit.OnErrorOpen)}); !d.Allowed {
		t.Error("an unrenewed slot was still held after its Per")
	}
}
