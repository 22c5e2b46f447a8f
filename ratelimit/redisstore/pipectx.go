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
//
// Its timer is set only when Done is called (go-redis calls it on every
// pipeline, before it takes a connection), and it is not stopped when the
// pipeline is done: a later use whose deadline is no earlier than the one
// the timer is set for (the usual case: deadlines grow with time) keeps
// it, and when it runs it either closes done, sets itself again for the
// use then in progress, or finds no use and stays unset. So a pipeline
// pays a timer operation only when the timer is unset or set for later
// than its deadline: for a call that writes pipeline after pipeline,
// about once per deadline's length instead of a reset and a stop each.
// A timer left set keeps its call (and the store the call belongs to)
// reachable until it runs, at most one deadline after the last pipeline.
//
// A pipeCtx is used by one pipeline at a time: start before, stop after
// (when nothing holds it any more but the commands, which read only its
// deadline).
type pipeCtx struct {
	at time.Time

	mu    sync.Mutex
	done  chan struct{} // made on first Done; replaced after it closed
	timer *time.Timer   // runs fire; nil until first set
	// set says that a run of the timer is due, at when.
	set  bool
	when time.Time
	// watched says that Done was called in this use: done must close at
	// at.
	watched bool
	closed  bool
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

// stop ends the use; after it c may be started again. The timer is left
// as it is (see pipeCtx).
func (c *pipeCtx) stop() {
	c.mu.Lock()
	c.watched = false
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
	if !c.closed {
		c.watched = true
		if !c.set || c.when.After(c.at) {
			c.setTimer()
		}
	}
	return c.done
}

// setTimer sets the timer for c.at. c.mu is held.
func (c *pipeCtx) setTimer() {
	d := time.Until(c.at)
	if c.timer == nil {
		c.timer = time.AfterFunc(d, c.fire)
	} else {
		c.timer.Reset(d)
	}
	c.set, c.when = true, c.at
}

// fire closes done if the use in progress watches it and its deadline
// has passed. A run before that deadline (set for an earlier use's, or
// one that the use moved) sets the timer again for it, and a run that
// finds no use watching leaves the timer unset.
func (c *pipeCtx) fire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.set = false
	if !c.watched || c.closed {
		return
	}
	if time.Until(c.at) > 0 {
		c.setTimer()
		return
	}
	close(c.done)
	c.closed = true
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
