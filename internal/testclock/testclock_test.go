package testclock

import (
	"testing"
	"time"
)

func TestClockMovesOnlyWhenTold(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	c := New(t0)
	if !c.Now().Equal(t0) {
		t.Fatalf("Now = %v, want %v", c.Now(), t0)
	}
	c.Add(1500 * time.Millisecond)
	if want := t0.Add(1500 * time.Millisecond); !c.Now().Equal(want) {
		t.Fatalf("after Add: %v, want %v", c.Now(), want)
	}
	c.Add(-time.Second)
	c.Set(t0.Add(-time.Hour))
	if want := t0.Add(-time.Hour); !c.Now().Equal(want) {
		t.Fatalf("after Set backwards: %v, want %v", c.Now(), want)
	}
}

func TestAfterFiresWhenTheClockPassesIt(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	c := New(t0)
	if !c.AwaitWaiters(0, time.Second) {
		t.Fatal("zero waiters not reached at once")
	}
	a, b := c.After(time.Second), c.After(2*time.Second)
	if now := <-c.After(0); !now.Equal(t0) {
		t.Fatalf("After(0) fired with %v, want %v", now, t0)
	}
	if n := c.Waiters(); n != 2 {
		t.Fatalf("%d waiters, want 2", n)
	}
	c.Add(999 * time.Millisecond)
	select {
	case <-a:
		t.Fatal("fired 1 ms early")
	default:
	}
	c.Add(time.Millisecond)
	if now := <-a; !now.Equal(t0.Add(time.Second)) {
		t.Fatalf("fired with %v", now)
	}
	select {
	case <-b:
		t.Fatal("the later channel fired too")
	default:
	}
	c.Set(t0.Add(time.Hour))
	<-b
	if n := c.Waiters(); n != 0 {
		t.Fatalf("%d waiters left, want 0", n)
	}
	if c.AwaitWaiters(1, 10*time.Millisecond) {
		t.Fatal("AwaitWaiters(1) reported a waiter that does not exist")
	}
}
