package gateway

import (
	"sync"
	"sync/atomic"
	"time"
)

// slotQueueSpec is a concurrency policy's queue, from its configuration.
type slotQueueSpec struct {
	max     int           // most requests waiting per key on this instance
	timeout time.Duration // longest wait
}

// slotQueueRetry is how often the request at the head of a queue asks the
// store again while it waits: slots held by other instances free without
// telling this one. A release on this instance wakes it at once.
const slotQueueRetry = 100 * time.Millisecond

// slotQueues are the requests of this instance waiting for a concurrency
// slot, in arrival order per store key. Only the head of a key's queue asks
// the store; the others wait for their turn, so requests are admitted in
// the order they came. It is bounded by the queues' max per key, and a key
// is forgotten when its queue empties. Safe for concurrent use.
type slotQueues struct {
	// count is the number of requests waiting, over every key, so that
	// the release of a slot nobody waits for takes no lock.
	count atomic.Int64
	mu    sync.Mutex
	keys  map[string][]*slotWaiter
	// changed is closed and dropped whenever a request enters or leaves a
	// queue, for await; nil when nobody awaits.
	changed chan struct{}
}

// slotWaiter is one waiting request. wake, of capacity 1, is signalled when
// it becomes the head and when a slot of its key is released here.
type slotWaiter struct {
	wake chan struct{}
}

func newSlotQueues() *slotQueues {
	return &slotQueues{keys: map[string][]*slotWaiter{}}
}

// enter appends a waiter to key's queue, or returns nil when max are
// already waiting. A waiter that enters an empty queue is the head.
func (q *slotQueues) enter(key string, max int) *slotWaiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	ws := q.keys[key]
	if len(ws) >= max {
		return nil
	}
	w := &slotWaiter{wake: make(chan struct{}, 1)}
	q.keys[key] = append(ws, w)
	q.count.Add(1)
	q.changedLocked()
	return w
}

// head reports whether w is first in key's queue.
func (q *slotQueues) head(key string, w *slotWaiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	ws := q.keys[key]
	return len(ws) > 0 && ws[0] == w
}

// leave removes w from key's queue and, when w was the head, wakes the
// next one.
func (q *slotQueues) leave(key string, w *slotWaiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ws := q.keys[key]
	for i, x := range ws {
		if x != w {
			continue
		}
		ws = append(ws[:i], ws[i+1:]...)
		q.count.Add(-1)
		q.changedLocked()
		if len(ws) == 0 {
			delete(q.keys, key)
			return
		}
		q.keys[key] = ws
		if i == 0 {
			signal(ws[0].wake)
		}
		return
	}
}

// notify wakes the head of key's queue: a slot of key was released here.
func (q *slotQueues) notify(key string) {
	if q.count.Load() == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if ws := q.keys[key]; len(ws) > 0 {
		signal(ws[0].wake)
	}
}

// waiting returns the number of requests waiting for key.
func (q *slotQueues) waiting(key string) int {
	if q.count.Load() == 0 {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.keys[key])
}

// total returns the number of requests waiting, over every key.
func (q *slotQueues) total() int {
	n := 0
	for _, ws := range q.keys {
		n += len(ws)
	}
	return n
}

// changedLocked wakes the callers of await. q.mu is held.
func (q *slotQueues) changedLocked() {
	if q.changed != nil {
		close(q.changed)
		q.changed = nil
	}
}

// await blocks until exactly n requests wait, over every key, or timeout
// (real time) passes; it reports whether n was reached. For tests and
// diagnostics: requests enter queues from their own goroutines.
func (q *slotQueues) await(n int, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for {
		q.mu.Lock()
		if q.total() == n {
			q.mu.Unlock()
			return true
		}
		if q.changed == nil {
			q.changed = make(chan struct{})
		}
		ch := q.changed
		q.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			return false
		}
	}
}

// signal sends on a channel of capacity 1 unless a signal is pending.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
