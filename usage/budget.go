package usage

import "sync/atomic"

// A Budget is a number of bytes shared by every request that buffers a
// body to find its reservation (FromRequestWithin): bytes held are taken
// from it before they are allocated and given back when the request ends,
// so the bodies held at once never take more memory than the budget,
// however many callers send them slowly. The zero Budget holds nothing;
// a nil *Budget is unlimited. Its methods are safe for concurrent use.
type Budget struct {
	left atomic.Int64
}

// NewBudget returns a budget of n bytes (n ≤ 0: nothing can be taken).
func NewBudget(n int64) *Budget {
	b := &Budget{}
	b.left.Store(max(n, 0))
	return b
}

// take takes n bytes, or nothing and reports false when fewer are left.
func (b *Budget) take(n int64) bool {
	if b == nil {
		return true
	}
	for {
		left := b.left.Load()
		if left < n {
			return false
		}
		if b.left.CompareAndSwap(left, left-n) {
			return true
		}
	}
}

// Give gives back n bytes taken before.
func (b *Budget) Give(n int64) {
	if b != nil && n > 0 {
		b.left.Add(n)
	}
}

// Left returns the bytes that can still be taken.
func (b *Budget) Left() int64 {
	if b == nil {
		return -1
	}
	return b.left.Load()
}
