package ratelimit

import (
	"context"
	"errors"
	"fmt"
)

// renewWith renews items with s, by RenewReport when s is a
// RenewReporter (by Renew otherwise, which reports no slot taken back),
// and checks its reply (see Renewal.check). A reply that fails the check
// is s's failure, wrapping ErrUnavailable (joined to s's own error, if
// any), and reports nothing: no index of it can be trusted.
func RenewWith(ctx context.Context, s Slots, items []Item) (Renewal, error) {
	var r Renewal
	var err error
	if rr, ok := s.(RenewReporter); ok {
		r, err = rr.RenewReport(ctx, items)
	} else {
		r.Lost, err = s.Renew(ctx, items)
	}
	if cerr := r.check(len(items)); cerr != nil {
		return Renewal{}, errors.Join(err, cerr)
	}
	return r, err
}

// check returns an error wrapping ErrUnavailable when r is no report on
// n items as Renewal describes: each list strictly increasing (no index
// twice), every index in [0, n), and no index both lost and taken back.
func (r Renewal) check(n int) error {
	for _, l := range []struct {
		name string
		idx  []int
	}{{"lost", r.Lost}, {"taken back", r.Retaken}} {
		for k, i := range l.idx {
			if i < 0 || i >= n || k > 0 && i <= l.idx[k-1] {
				return fmt.Errorf("%w: a renewal of %d items reported %s index %d at position %d of %d: want increasing indexes in [0, %d)",
					ErrUnavailable, n, l.name, i, k, len(l.idx), n)
			}
		}
	}
	if both := IntersectSorted(r.Lost, r.Retaken); len(both) > 0 {
		return fmt.Errorf("%w: a renewal of %d items reported index %d both lost and taken back", ErrUnavailable, n, both[0])
	}
	return nil
}

// intersectSorted returns the values in both a and b, each strictly
// increasing, in increasing order (nil when there are none: it allocates
// only for a common value).
func IntersectSorted(a, b []int) []int {
	var both []int
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i] < b[j]:
			i++
		case a[i] > b[j]:
			j++
		default:
			both = append(both, a[i])
			i, j = i+1, j+1
		}
	}
	return both
}

// Slots releases and renews concurrency slots: a SlotStore, or a stack.Stack.
type Slots interface {
	Release(ctx context.Context, items []Item) error
	Renew(ctx context.Context, items []Item) (lost []int, err error)
}
