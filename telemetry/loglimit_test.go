package telemetry

import (
	"fmt"
	"github.com/quotagate/quotagate/internal/testclock"
	"sync"
	"testing"
	"time"
)

func TestLogLimiterSteps(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := testclock.New(t0)
	l := NewLogLimiter(2, time.Second, clk.Now)
	type step struct {
		at         time.Duration
		key        string
		ok         bool
		suppressed int
	}
	steps := []step{
		{0, "a", true, 0},
		{100 * time.Millisecond, "a", true, 0},
		{200 * time.Millisecond, "a", false, 0},
		{300 * time.Millisecond, "a", false, 0},
		{300 * time.Millisecond, "b", true, 0}, // keys are independent
		{999 * time.Millisecond, "a", false, 0},
		{1000 * time.Millisecond, "a", true, 3}, // new window carries the count
		{1100 * time.Millisecond, "a", true, 0},
		{1200 * time.Millisecond, "a", false, 0},
		{500 * time.Millisecond, "a", true, 1}, // clock went back: window restarts
		{5 * time.Second, "a", true, 0},
	}
	for i, s := range steps {
		clk.Set(t0.Add(s.at))
		ok, sup := l.Allow(s.key)
		if ok != s.ok || sup != s.suppressed {
			t.Errorf("step %d (%v %s): Allow = %v, %d; want %v, %d", i, s.at, s.key, ok, sup, s.ok, s.suppressed)
		}
	}
}

func TestLogLimiterEdgeCases(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := testclock.New(t0)
	off := NewLogLimiter(1, 0, clk.Now)
	for range 5 {
		if ok, _ := off.Allow("k"); !ok {
			t.Fatal("interval 0 must not limit")
		}
	}
	one := NewLogLimiter(0, time.Minute, clk.Now) // taken as 1
	if ok, _ := one.Allow("k"); !ok {
		t.Fatal("first line refused")
	}
	if ok, _ := one.Allow("k"); ok {
		t.Fatal("second line in the window allowed")
	}
}

func TestLogLimiterBoundsKeys(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := testclock.New(t0)
	l := NewLogLimiter(1, time.Second, clk.Now)
	l.Allow("owes")
	l.Allow("owes") // suppressed: must survive sweeps
	for i := range maxLimiterKeys {
		l.Allow(fmt.Sprint("k", i))
	}
	clk.Set(t0.Add(2 * time.Second))
	l.Allow("new") // triggers a sweep of expired keys
	if n := len(l.keys); n != 2 {
		t.Fatalf("after sweep %d keys, want 2 (owes, new)", n)
	}
	if ok, sup := l.Allow("owes"); !ok || sup != 1 {
		t.Fatalf("owes: Allow = %v, %d; want true, 1", ok, sup)
	}
}

func TestLogLimiterConcurrent(t *testing.T) {
	clk := testclock.New(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	l := NewLogLimiter(10, time.Hour, clk.Now)
	var mu sync.Mutex
	allowed := 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if ok, _ := l.Allow("k"); ok {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if allowed != 10 {
		t.Fatalf("allowed %d lines, want 10", allowed)
	}
	clk.Add(time.Hour)
	if ok, sup := l.Allow("k"); !ok || sup != 790 {
		t.Fatalf("next window: %v, %d; want true, 790", ok, sup)
	}
}

// TestLogLimiterFullWithinOneWindow: distinct keys arriving faster than
// their windows end cannot grow the state past maxLimiterKeys; the lines of
// untracked keys are let through.
func TestLogLimiterFullWithinOneWindow(t *testing.T) {
	clk := testclock.New(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	l := NewLogLimiter(1, time.Hour, clk.Now)
	for i := range 3 * maxLimiterKeys {
		if ok, _ := l.Allow(fmt.Sprint("k", i)); !ok {
			t.Fatalf("first line of key %d refused", i)
		}
	}
	if n := len(l.keys); n > maxLimiterKeys {
		t.Fatalf("%d keys held, want at most %d", n, maxLimiterKeys)
	}
	if ok, _ := l.Allow("k0"); ok {
		t.Fatal("a tracked key's second line in its window was let through")
	}
}
