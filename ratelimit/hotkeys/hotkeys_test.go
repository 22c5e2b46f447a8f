package hotkeys

import (
	"strconv"
	"testing"
	"time"
)

func TestHotKeysFindsTheHotKeyInBoundedMemory(t *testing.T) {
	now := time.Unix(0, 0)
	h := New(Options{Capacity: 8, SampleEvery: 1, Window: 10 * time.Second, Now: func() time.Time { return now }})
	// 10 s of traffic: one hot key at 100/s among 1000 keys at 1/s each.
	for s := 0; s < 10; s++ {
		for i := 0; i < 100; i++ {
			h.Observe("hot")
			h.Observe("cold-" + strconv.Itoa(s*100+i))
		}
		now = now.Add(time.Second)
	}
	top := h.Top(3)
	if len(top) == 0 || top[0].Key != "hot" {
		t.Fatalf("top = %+v, want the hot key first", top)
	}
	if top[0].PerSecond-top[0].Error > 100.5 || top[0].PerSecond < 99.5 {
		t.Fatalf("hot key rate %v ± %v, want about 100/s", top[0].PerSecond, top[0].Error)
	}
	if n := len(h.current) + len(h.last); n > 16 {
		t.Fatalf("%d entries kept with capacity 8", n)
	}
	// A window later with no traffic, the hot key is gone.
	now = now.Add(10 * time.Second)
	if top := h.Top(3); len(top) != 0 {
		t.Fatalf("after a quiet window: %+v", top)
	}
}

func TestHotKeysSamples(t *testing.T) {
	h := New(Options{SampleEvery: 4, Window: time.Hour, Now: func() time.Time { return time.Unix(0, 0) }})
	for i := 0; i < 40000; i++ {
		h.Observe("k")
	}
	// Binomial(40000, 1/4): mean 10000, standard deviation about 87; 600
	// is about 7 standard deviations.
	if c := h.current["k"]; c == nil || c.n < 9400 || c.n > 10600 {
		t.Fatalf("sampled count = %+v, want about 10000 of 40000 at 1 in 4", c)
	}
}
