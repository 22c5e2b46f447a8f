package gateway

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/ratelimit/memstore"
	"github.com/quotagate/quotagate/ratelimit/stack"
)

// closeCounter is a memory store that counts its Close calls.
type closeCounter struct {
	*memstore.Store
	closes atomic.Int32
}

func (c *closeCounter) Close() error {
	c.closes.Add(1)
	return c.Store.Close()
}

// countingStores opens memory stacks and remembers their stores in order.
type countingStores struct{ opened []*closeCounter }

func (c *countingStores) open(cfg config.Store) (*stack.Stack, error) {
	s := &closeCounter{Store: memstore.New(memstore.Options{})}
	c.opened = append(c.opened, s)
	return stack.New(s, stack.Options{FleetSize: cfg.FleetSize}), nil
}

// A store that a reload replaced is closed by Close when its grace period
// has not run out, and never again once Close has returned; a closed
// gateway refuses to reload.
func TestCloseClosesRetiredStoresOnce(t *testing.T) {
	stores := &countingStores{}
	gw, err := New(loadBase(t), Options{Getenv: testGetenv, OpenStore: stores.open})
	if err != nil {
		t.Fatal(err)
	}
	next := loadBase(t)
	next.Store.FleetSize = 3 // a changed store section opens a new store
	if err := gw.Reload(next, time.Hour); err != nil {
		t.Fatal(err)
	}
	if len(stores.opened) != 2 || stores.opened[0].closes.Load() != 0 {
		t.Fatalf("after the reload: %d stores opened, the old one closed %d times; want 2 and 0 (its grace runs)",
			len(stores.opened), stores.opened[0].closes.Load())
	}
	if err := gw.Close(); err != nil {
		t.Fatal(err)
	}
	for i, s := range stores.opened {
		if n := s.closes.Load(); n != 1 {
			t.Errorf("store %d closed %d times by Close, want 1", i, n)
		}
	}
	if err := gw.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := gw.Reload(loadBase(t), 0); err == nil {
		t.Error("Reload after Close succeeded")
	}
	for i, s := range stores.opened {
		if n := s.closes.Load(); n != 1 {
			t.Errorf("store %d closed %d times in all, want 1", i, n)
		}
	}
}

// A retired store whose grace has passed is closed by its timer, and Close
// then closes only the live one.
func TestRetiredStoreClosesAfterGrace(t *testing.T) {
	stores := &countingStores{}
	gw, err := New(loadBase(t), Options{Getenv: testGetenv, OpenStore: stores.open})
	if err != nil {
		t.Fatal(err)
	}
	next := loadBase(t)
	next.Store.FleetSize = 3
	if err := gw.Reload(next, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for stores.opened[0].closes.Load() == 0 {
		if time.Now().After(deadline) {
			proctest.FatalOverrun(t, "the retired store was not closed 10s after its 1ms grace")
		}
		time.Sleep(time.Millisecond) // polling the timer's effect; there is no clock to inject into time.AfterFunc
	}
	if err := gw.Close(); err != nil {
		t.Fatal(err)
	}
	if a, b := stores.opened[0].closes.Load(), stores.opened[1].closes.Load(); a != 1 || b != 1 {
		t.Errorf("closes: retired %d, live %d; want 1 and 1", a, b)
	}
}
