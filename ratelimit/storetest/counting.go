package storetest

import (
	"context"
	"sync/atomic"

	"github.com/quotagate/quotagate/ratelimit"
)

// CountingStore counts the Decide calls that reach the store it wraps, so a
// test can show how many store calls a layer above saved. It changes no
// decision.
type CountingStore struct {
	ratelimit.Store
	calls atomic.Int64
}

// Decide counts the call and passes it to the wrapped store.
func (s *CountingStore) Decide(ctx context.Context, items []ratelimit.Item) (ratelimit.Decision, error) {
	s.calls.Add(1)
	return s.Store.Decide(ctx, items)
}

// Calls is the number of Decide calls so far.
func (s *CountingStore) Calls() int64 { return s.calls.Load() }
