package slotkeeper

import (
	"context"

	"github.com/quotagate/quotagate/ratelimit"
)

// releaseQueue is the background releases of one store waiting to be sent.
// At most one Release per store is in flight: releases that come
// meanwhile wait here and go together in the next one, so that at low load
// a release is sent at once, alone, and under load the requests that end
// within one round trip share one store call (on Redis one script call per
// hash slot, or per 64 slots on a single primary) instead of one each.
// Guarded by Keeper.mu.
type releaseQueue struct {
	items []ratelimit.Item
	helds int // the Release calls whose items are in items
}

// enqueueLocked adds the items of one Release to the queue of store s and
// reports whether the caller must start draining it (nobody is). The
// caller holds k.mu.
func (k *Keeper) enqueueLocked(s ratelimit.Slots, items []ratelimit.Item) (start bool) {
	q, ok := k.queues[s]
	if !ok {
		q = &releaseQueue{}
		k.queues[s] = q
	}
	q.items = append(q.items, items...)
	q.helds++
	return !ok
}

// drain sends the queue of store s, batch after batch, until it finds it
// empty; it then forgets the queue, so that the next release starts
// another drain.
func (k *Keeper) drain(s ratelimit.Slots) {
	for {
		k.mu.Lock()
		q := k.queues[s]
		items, n := q.items, q.helds
		q.items, q.helds = nil, 0
		if n == 0 {
			delete(k.queues, s)
		}
		k.mu.Unlock()
		if n == 0 {
			return
		}
		k.release(s, items, n)
	}
}

// release frees items in s under the keeper's Timeout and reports it; n
// is the number of Release calls they came from.
func (k *Keeper) release(s ratelimit.Slots, items []ratelimit.Item, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), k.opts.Timeout)
	if err := s.Release(ctx, items); err != nil && k.opts.OnError != nil {
		k.opts.OnError("release", err)
	}
	cancel()
	if k.opts.Released != nil {
		k.opts.Released(items)
	}
	for range n {
		k.releases.Done()
		k.running.Done()
	}
}
