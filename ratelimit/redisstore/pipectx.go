package redisstore

import (
	"context"
	"sync"
	"time"
)

// pipeCtx is the context a pipeline runs under: it ends at a deadline and
// carries no values and no cancellation. Each scriptCall holds one and
// lends it to the pipelines it writes, so that a pipeline allocates no
// context, timer or channel (context.WithDeadline allocates all three).
// Its timer is armed only when Done is called (go-redis does when it may
// wait for a connection), and it is reused.
//
// A pipeCtx is used by one pipeline at a time: start before, stop after
// (when nothing holds it any more but the commands, which read only its
// deadline).
type pipeCtx struct {
	at time.Time

	mu     sync.Mutex
	done   chan struct{} // made on first Done; replaced after it closed
	timer  *time.Timer   // closes done at at; nil until first armed
	armed  bool
	closed bool
}

var _ context.Context = (*pipeCtx)(nil)

// start readies c for a pipeline that ends at at.
func (c *pipeCtx) start(at time.Time) {
	c.mu.Lock()
	c.at = at
	if c.closed {
		c.done, c.closed = nil, false
	}
	c.mu.Unlock()
}

// stop disarms the timer; after it c may be started again.
func (c *pipeCtx) stop() {
	c.mu.Lock()
	if c.armed {
		c.timer.Stop()
		c.armed = false
	}
	c.mu.Unlock()
}

func (c *pipeCtx) Deadline() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at, true
}

func (c *pipeCtx) Value(any) any { return nil }

// Done returns a channel closed at the deadline.
func (c *pipeCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
	}
	if !c.armed && !c.closed {
		d := time.Until(c.at)
		if c.timer == nil {
			c.timer = time.AfterFunc(d, c.fire)
		} else {
			c.timer.Reset(d)
		}
		c.armed = true
	}
	return c.done
}

// fire closes done, unless the timer was stopped. A late run from an
// earlier use, before this use's deadline, sets the timer again for it:
// left alone, done would never close, as the run consumed the timer.
func (c *pipeCtx) fire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.armed || c.closed {
		return
	}
	if d := time.Until(c.at); d > 0 {
		c.timer.Reset(d)
		return
	}
	close(c.done)
	c.closed, c.armed = true, false
}

// Err is context.DeadlineExceeded once the deadline has passed, else nil.
func (c *pipeCtx) Err() error {
	c.mu.Lock()
	closed, at := c.closed, c.at
	c.mu.Unlock()
	if closed || !time.Now().Before(at) {
		return context.DeadlineExceeded
	}
	return nil
}
