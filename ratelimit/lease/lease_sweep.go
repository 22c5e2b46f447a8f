package lease

import (
	"context"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

// idleForget is how long a block must be empty and unused, beyond twice
// its TTL, before the sweeper forgets it (and its rate estimate).
const idleForget = time.Minute

// sweeper runs ReturnExpired every period until Close.
func (s *Store) sweeper(every time.Duration) {
	defer s.stopped.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
			_, _ = s.sweep(ctx, false)
			cancel()
		}
	}
}

// ReturnExpired gives back to their keys the units of every block older
// than its TTL on the store's clock (and of expired blocks that decisions
// have set aside), in one Refund call, and forgets blocks that have been
// empty and unused for a while. It returns the units it gave back. On
// error (the refund failed, wrapping ErrUnavailable) those units are
// counted as lost, not retried: whether they went back is unknown.
//
// The background sweeper calls it every Options.SweepEvery; tests
// with a fake clock call it directly.
func (s *Store) ReturnExpired(ctx context.Context) (int64, error) {
	return s.sweep(ctx, false)
}

// sweep returns expired units (every block's units when all is set).
func (s *Store) sweep(ctx context.Context, all bool) (int64, error) {
	now := s.now()
	var items []ratelimit.Item
	var units int64
	if s.autoPruneDue(now, autoPruneEvery) {
		s.pruneAuto(now)
	}
	for i := range s.shards {
		items, units = s.shards[i].sweep(now, all, items, units)
	}
	if len(items) == 0 {
		return 0, nil
	}
	s.stats.returns.Add(int64(len(items)))
	if err := s.inner.Refund(ctx, items); err != nil {
		s.stats.lost.Add(units)
		return 0, err
	}
	s.stats.returned.Add(units)
	return units, nil
}

// sweep moves the expired units of the shard's blocks (every block's
// units when all is set) into items to give back, one item per key, adds
// them to units, and forgets the blocks that have been empty and unused
// for a while.
func (sh *leaseShard) sweep(now time.Time, all bool, items []ratelimit.Item, units int64) ([]ratelimit.Item, int64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for key, b := range sh.blocks {
		b.mu.Lock()
		if all {
			b.returning += b.left
			b.left = 0
		} else {
			b.expire(now)
		}
		if b.returning > 0 {
			it := b.item
			it.Cost = min(b.returning, it.Limit.Burst)
			it.Shadow, it.Lease = false, ratelimit.Lease{}
			items = append(items, it)
			units += it.Cost
			b.returning = 0
		}
		idle := now.Sub(b.lastSeen) >= 2*b.item.Lease.TTL+idleForget
		if b.users == 0 && b.reserving == 0 && b.left == 0 && idle {
			delete(sh.blocks, key)
		}
		b.mu.Unlock()
	}
	return items, units
}

// Held returns the units this instance holds reserved for key and not yet
// admitted (0 for a key it holds nothing of), counting those of expired
// blocks that wait to be given back.
func (s *Store) Held(key string) int64 {
	sh := s.shard(key)
	sh.mu.Lock()
	b := sh.blocks[key]
	sh.mu.Unlock()
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.left + b.returning
}
