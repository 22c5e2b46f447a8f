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
	mu sync.Mutex
	t  time.Time
}

// New returns a Clock set to t.
func New(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the time last set.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t, forwards or backwards.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// Add moves the clock by d, forwards or (d < 0) backwards.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
