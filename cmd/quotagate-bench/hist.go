package main

import (
	"math/bits"
	"time"
)

// histSubBits is the number of mantissa bits kept per power of two: each
// bucket spans at most 1/2^histSubBits (0.8%) of its lower bound.
const histSubBits = 7

const (
	histSub     = 1 << histSubBits
	histBuckets = (64 - histSubBits + 1) * histSub
)

// hist is a log-linear latency histogram in the manner of HDR histograms:
// durations below 2^histSubBits ns are counted exactly, larger ones in
// buckets whose width is at most 0.8% of their value. The zero value is
// empty and ready to use. A hist is not safe for concurrent use; give each
// goroutine its own and merge them.
type hist struct {
	counts [histBuckets]uint64
	total  uint64
	max    time.Duration
}

// bucketOf returns the bucket index of v nanoseconds (v >= 0).
func bucketOf(v uint64) int {
	if v < histSub {
		return int(v)
	}
	exp := bits.Len64(v) - histSubBits // >= 1
	mant := v >> uint(exp-1)           // in [histSub, 2*histSub)
	return exp*histSub + int(mant-histSub)
}

// bucketLow returns the smallest value (ns) that falls in bucket b.
func bucketLow(b int) uint64 {
	if b < histSub {
		return uint64(b)
	}
	exp := b / histSub
	mant := uint64(b%histSub) + histSub
	return mant << uint(exp-1)
}

// Record counts one duration; negative durations count as 0.
func (h *hist) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(uint64(d))]++
	h.total++
	if d > h.max {
		h.max = d
	}
}

// Merge adds o's counts to h.
func (h *hist) Merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.max = max(h.max, o.max)
}

// Count is the number of recorded durations.
func (h *hist) Count() uint64 { return h.total }

// Quantile returns the smallest bucket bound at or above which lies no more
// than 1-q of the recorded durations, for q in [0, 1]: the lower bound of
// the bucket holding the ceil(q*n)-th smallest value, capped at the
// largest value recorded, which it returns exactly for the last rank
// (q = 1). It is 0 when nothing was recorded.
func (h *hist) Quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := uint64(q*float64(h.total) + 0.999999999)
	rank = min(max(rank, 1), h.total)
	if rank == h.total {
		return h.max
	}
	var seen uint64
	for b, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(time.Duration(bucketLow(b)), h.max)
		}
	}
	return h.max
}
