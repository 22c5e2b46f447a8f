package redisstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/ratelimit"
)

// maxSlotItems bounds the items of one renewal or release script call, so
// that a renewal round of many slots never runs one long script that holds up
// the decisions queued behind it on its node: each item costs the script
// at most five commands, seven for a renewal that takes its slot back
// (about 10 to 15 µs of server time), so a full call runs well under a
// millisecond.
const maxSlotItems = 64

var _ ratelimit.RenewReporter = (*RedisStore)(nil)

// Release frees the concurrency slots of items (see ratelimit.SlotStore),
// in script calls grouped as Renew's and sent together. A failure wraps
// ErrUnavailable; the slots it concerns then expire on their own.
func (s *RedisStore) Release(ctx context.Context, items []ratelimit.Item) error {
	if err := ratelimit.CheckSlotItems(items); err != nil {
		return err
	}
	one := make([]ratelimit.Item, len(items))
	for i, it := range items {
		it.Cost = 1
		one[i] = it
	}
	sent := s.slotCalls(ctx, modeRefund, one)
	for _, err := range sent.errs {
		if err != nil {
			return ratelimit.Unavailable("release", withDeadline(sent.bound, err))
		}
	}
	return nil
}

// Renew extends the concurrency slots of items to their Limit.Per from
// now, on the store's clock, taking back those no longer held while their
// key has room, and returns the indexes of the items whose slot was lost
// (see ratelimit.SlotStore).
//
// Items are renewed in as few script calls as the deployment allows, sent
// together (one pipeline per node): on a Cluster one call per hash slot,
// since a script may only touch keys of one slot; on a single primary
// (standalone or Sentinel) one call for all of them, whatever their hash
// tags. Either way a call carries at most maxSlotItems items. A renewal
// round of N slots of N tenants is thus ⌈N / 64⌉ calls on one primary
// instead of N.
//
// A failure wraps ErrUnavailable; the items of the calls that succeeded
// are still reported.
func (s *RedisStore) Renew(ctx context.Context, items []ratelimit.Item) ([]int, error) {
	r, err := s.RenewReport(ctx, items)
	return r.Lost, err
}

// RenewReport is Renew, reporting the slots taken back too (see
// ratelimit.RenewReporter).
func (s *RedisStore) RenewReport(ctx context.Context, items []ratelimit.Item) (ratelimit.Renewal, error) {
	if err := ratelimit.CheckSlotItems(items); err != nil {
		return ratelimit.Renewal{}, err
	}
	sent := s.slotCalls(ctx, modeRenew, items)
	var r ratelimit.Renewal
	var failed error
	for g, gr := range sent.groups {
		err := sent.errs[g]
		if err == nil {
			err = renewalOf(sent.vals[g], sent.idx[gr.lo:gr.hi], &r)
		}
		if err != nil && failed == nil {
			failed = withDeadline(sent.bound, err)
		}
	}
	slices.Sort(r.Lost)
	slices.Sort(r.Retaken)
	if failed != nil {
		return r, ratelimit.Unavailable("renew", failed)
	}
	return r, nil
}

// slotReplies is what slotCalls sent and got back.
type slotReplies struct {
	// groups are the calls' items, as ranges of idx (see slotGroups).
	groups []group
	idx    []int
	// vals and errs are each call's reply or error.
	vals []any
	errs []error
	// bound is the deadline they ran under.
	bound bound
}

// slotCalls sends items in script calls of mode, grouped by slotGroups,
// together, under one Timeout.
func (s *RedisStore) slotCalls(ctx context.Context, mode string, items []ratelimit.Item) slotReplies {
	b := newBound(ctx, s.opts.Timeout)
	if len(items) == 0 {
		return slotReplies{bound: b}
	}
	nowUS, useNow := s.now()
	idx := make([]int, len(items))
	groups := s.slotGroups(items, idx)
	calls := make([]*scriptCall, len(groups))
	for g, gr := range groups {
		calls[g] = s.getCall(b)
		calls[g].build(mode, nowUS, useNow, items, idx[gr.lo:gr.hi], nil)
	}
	vals, errs := s.exchange(calls)
	return slotReplies{groups: groups, idx: idx, vals: vals, errs: errs, bound: b}
}

// renewalOf checks a renewal reply for the items idx, one flag each (1
// renewed, 2 taken back, 0 lost), and appends to r the indexes of those
// lost and of those taken back. Any surprise is an error wrapping
// ErrUnavailable, and then nothing is appended.
func renewalOf(v any, idx []int, r *ratelimit.Renewal) error {
	arr, ok := v.([]any)
	if !ok || len(arr) != len(idx) {
		return fmt.Errorf("%w: renewal replied %s, want %d flags", ratelimit.ErrUnavailable, replyShape(v), len(idx))
	}
	for i, e := range arr {
		if f, ok := e.(int64); !ok || f < 0 || f > 2 {
			return fmt.Errorf("%w: renewal reply value %d is %s, want 0, 1 or 2", ratelimit.ErrUnavailable, i, replyShape(e))
		}
	}
	for i, e := range arr {
		switch e.(int64) {
		case 0:
			r.Lost = append(r.Lost, idx[i])
		case 2:
			r.Retaken = append(r.Retaken, idx[i])
		}
	}
	return nil
}

// slotGroups splits items into the groups of slot calls (see Renew),
// laying out the indexes of each group's items in idx (which must have
// room for len(items)), group after group: in the order of the items on
// one primary, by hash slot on a Cluster.
func (s *RedisStore) slotGroups(items []ratelimit.Item, idx []int) []group {
	var groups []group
	if _, one := s.client.(*redis.Client); one {
		for i := range idx {
			idx[i] = i
		}
		for lo := 0; lo < len(items); lo += maxSlotItems {
			groups = append(groups, group{lo: lo, hi: min(lo+maxSlotItems, len(items))})
		}
		return groups
	}
	slots := make([]uint16, len(items))
	for i, it := range items {
		idx[i], slots[i] = i, keySlot(it.Key)
	}
	slices.SortStableFunc(idx, func(a, b int) int { return int(slots[a]) - int(slots[b]) })
	for lo := 0; lo < len(idx); {
		hi := lo + 1
		for hi < len(idx) && hi-lo < maxSlotItems && slots[idx[hi]] == slots[idx[lo]] {
			hi++
		}
		groups = append(groups, group{lo: lo, hi: hi})
		lo = hi
	}
	return groups
}

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// keySlot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of
// its hash tag (see hashTag), modulo 16384.
func keySlot(key string) uint16 {
	var crc uint16
	tag := hashTag(key)
	for i := range len(tag) {
		crc ^= uint16(tag[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % clusterSlots
}
