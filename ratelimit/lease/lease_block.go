package lease

import (
	"math"
	"sync"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

// block is this instance's reservation for one leased key.
//
// Units in left were taken from the key's bucket by an admitted
// reservation and are admitted locally, cost by cost, until the block is
// empty or TTL after reservedAt, when what is left moves to returning
// and the sweeper gives it back.
type block struct {
	mu sync.Mutex
	// item is the last item seen for the key; returns use its key and
	// limit.
	item ratelimit.Item
	// left is the units reserved and not yet admitted.
	left int64
	// reservedAt is when the current block was reserved; left expires
	// item.Lease.TTL after it.
	reservedAt time.Time
	// returning is the units of expired blocks waiting to be given back.
	returning int64
	// reserving counts the reservations in flight; wake is closed when it
	// drops to 0.
	reserving int
	wake      chan struct{}
	// denied is set when the last reservation to land was denied or
	// failed.
	denied bool
	// users counts the decisions that hold units of this block or may put
	// some back; the sweeper forgets a block only when it is 0.
	users int
	// rate is the estimate of this instance's admissions of the key, in
	// units per second (+Inf when they came faster than the clock ticks);
	// used counts the units admitted since sampleAt.
	rate     float64
	used     int64
	sampleAt time.Time
	// remaining is the key's remaining units that the last reservation
	// reported (the rest of the fleet may have taken some since).
	remaining int64
	lastSeen  time.Time
	// demand is, for an Auto item, the units this instance asked of the
	// key in about the last TTL (see autoTarget), as of the last decision.
	demand float64
}

// expire moves the units of a block older than its TTL to returning. It
// is called with b.mu held.
func (b *block) expire(now time.Time) {
	if b.left > 0 && !now.Before(b.reservedAt.Add(b.item.Lease.TTL)) {
		b.returning += b.left
		b.left = 0
	}
}

// blockCap is the most units a block of it may hold among n >= 1
// instances: MaxBlock (when set), and at most Burst/(2×n) so that the instances
// together hold at most half the bucket, but never less than the item's
// cost.
func blockCap(it ratelimit.Item, n int64) int64 {
	c := it.Limit.Burst / (2 * n)
	if it.Lease.MaxBlock > 0 {
		c = min(c, it.Lease.MaxBlock)
	}
	return max(c, it.Cost)
}

// sample folds the admissions since the last sample into the rate
// estimate: an average of the old estimate and the new sample, or the new
// sample alone when the old one is more than a TTL old. It is called with
// b.mu held, by the decision that reserves a new block.
func (b *block) sample(now time.Time) {
	if b.sampleAt.IsZero() {
		b.sampleAt, b.used = now, 0
		return
	}
	dt := now.Sub(b.sampleAt)
	var r float64
	switch {
	case dt <= 0 && b.used == 0:
		return
	case dt <= 0:
		r = math.Inf(1)
	default:
		r = float64(b.used) / dt.Seconds()
	}
	if dt >= b.item.Lease.TTL || b.rate == 0 {
		b.rate = r
	} else {
		b.rate = (b.rate + r) / 2
	}
	b.sampleAt, b.used = now, 0
}

// target is the size of the next block for an item of cost: the units
// this instance is expected to admit in one TTL at its estimated rate,
// within [cost, blockCap] for n instances. The first block of a key is its
// cost alone. For an Auto item it is the larger of that and the key's
// demand (see autoTarget): the demand, which the decisions made before
// the key was leased already fed, sizes the first blocks; the admissions
// between reservations follow a rising rate faster than the demand's
// average.
func (b *block) target(it ratelimit.Item, n int64) int64 {
	hi := blockCap(it, n)
	want := b.rate * it.Lease.TTL.Seconds()
	if it.Lease.Auto {
		want = max(want, b.demand)
	}
	if math.IsInf(want, 1) || want >= float64(hi) {
		return hi
	}
	return max(int64(math.Ceil(want)), it.Cost)
}
