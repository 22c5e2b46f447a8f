// Package testclock is the one fake clock of quotagate's tests: a time that
// moves only when the test says so. Code under test takes a func() time.Time;
// tests pass Clock.Now.
package testclock

import (
	"sync"
	"time"
)

// Clock is a fake clock that a test sets explicitly. Its zero value reads
// the zero time. It is safe for concurrent use.
type Clock struct {
	mu      sync.Mutex
	t       time.Time
	waiters []waiter
	// waiting is signalled whenever a waiter is added, for AwaitWaiters.
	waiting chan struct{}
}

// waiter is one channel of After, due at at.
type waiter struct {
	at time.Time
	ch chan time.Time
}

// New returns a Clock set to t.
func New(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the time last set.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t, forwards or backwards, and fires the channels
// of After that are due at t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.fire()
	c.mu.Unlock()
}

// Add moves the clock by d, forwards or (d < 0) backwards, as Set does.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.fire()
	c.mu.Unlock()
}

// After returns a channel that receives the clock's time once the clock has
// been moved to Now()+d or later (at once when d <= 0), like time.After.
func (c *Clock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waiters = append(c.waiters, waiter{at: c.t.Add(d), ch: ch})
	c.fire()
	if c.waiting != nil {
		close(c.waiting)
		c.waiting = nil
	}
	return ch
}

// Waiters returns the number of channels of After not fired yet.
func (c *Clock) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// AwaitWaiters blocks until at least n channels of After are pending, so
// that a test moves the clock only once the code under test waits on it.
// It gives up after timeout of real time and reports whether n were
// reached.
func (c *Clock) AwaitWaiters(n int, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for {
		c.mu.Lock()
		if len(c.waiters) >= n {
			c.mu.Unlock()
			return true
		}
		if c.waiting == nil {
			c.waiting = make(chan struct{})
		}
		ch := c.waiting
		c.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			return false
		}
	}
}

// fire sends on and drops the waiters due at c.t. c.mu is held.
func (c *Clock) fire() {
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.t) {
			kept = append(kept, w)
			continue
		}
		w.ch <- c.t
	}
	clear(c.waiters[len(kept):])
	c.waiters = kept
}
