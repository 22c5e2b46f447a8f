package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrBreakerOpen means a Breaker refused a Decide without calling its store,
// because the store failed repeatedly just before. Errors carrying it also
// wrap ErrUnavailable, so callers apply their failure policy as for any
// unavailable store.
var ErrBreakerOpen = errors.New("ratelimit: circuit breaker open")

// BreakerState is the state of a Breaker.
type BreakerState uint8

// The states of a Breaker.
const (
	// BreakerClosed passes every call to the store.
	BreakerClosed BreakerState = iota
	// BreakerOpen fails every call at once, until the cooldown has passed.
	BreakerOpen
	// BreakerHalfOpen lets one probe call through; its outcome closes the
	// breaker or opens it again. Other calls fail at once meanwhile.
	BreakerHalfOpen
)

// String returns "closed", "open" or "half-open".
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("BreakerState(%d)", uint8(s))
}

// BreakerOptions configures a Breaker. The zero value uses the defaults.
type BreakerOptions struct {
	// Failures is the number of consecutive failed calls (errors wrapping
	// ErrUnavailable) that opens the breaker. 0 or less means 5.
	Failures int
	// Cooldown is how long the breaker stays open before it lets a probe
	// through. 0 or less means 1s.
	Cooldown time.Duration
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// Breaker is a Store that stops calling a failing store for a while, so that
// a dead or hung Redis costs each request nothing instead of a full
// deadline.
//
// Closed, it passes calls through and counts consecutive failures (errors
// wrapping ErrUnavailable, except those caused by the caller cancelling its
// context); any success resets the count. At Failures it opens: Decide
// returns at once an error wrapping ErrUnavailable and ErrBreakerOpen. After
// Cooldown the next call is a probe that goes through (half-open): success
// closes the breaker, failure opens it for another Cooldown. ErrInvalid
// says nothing about the store's health and changes nothing.
//
// A Breaker is safe for concurrent use.
type Breaker struct {
	store    Store
	failures int
	cooldown time.Duration
	now      func() time.Time

	mu       sync.Mutex
	state    BreakerState
	failed   int       // consecutive failures while closed
	openedAt time.Time // when the breaker last opened
	probing  bool      // a half-open probe is in flight
}

var _ Store = (*Breaker)(nil)

// NewBreaker returns a closed Breaker around s.
func NewBreaker(s Store, opts BreakerOptions) *Breaker {
	b := &Breaker{store: s, failures: opts.Failures, cooldown: opts.Cooldown, now: opts.Now}
	if b.failures <= 0 {
		b.failures = 5
	}
	if b.cooldown <= 0 {
		b.cooldown = time.Second
	}
	if b.now == nil {
		b.now = time.Now
	}
	return b
}

// Decide calls the store unless the breaker is open (see Breaker).
func (b *Breaker) Decide(ctx context.Context, items []Item) (Decision, error) {
	ok, probe := b.admit()
	if !ok {
		return Decision{}, fmt.Errorf("%w: %w", ErrUnavailable, ErrBreakerOpen)
	}
	d, err := b.store.Decide(ctx, items)
	b.record(err, probe)
	return d, err
}

// admit reports whether a call may go to the store, and whether it is the
// half-open probe.
func (b *Breaker) admit() (ok, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerClosed:
		return true, false
	case BreakerOpen:
		if b.now().Sub(b.openedAt) < b.cooldown {
			return false, false
		}
		b.state = BreakerHalfOpen
	}
	if b.probing {
		return false, false
	}
	b.probing = true
	return true, true
}

// record updates the state with the outcome of a call that went through.
func (b *Breaker) record(err error, probe bool) {
	failed := errors.Is(err, ErrUnavailable) && !errors.Is(err, context.Canceled)
	neutral := err != nil && !failed // invalid items, or the caller left
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
		switch {
		case failed:
			b.state, b.openedAt = BreakerOpen, b.now()
		case !neutral:
			b.state, b.failed = BreakerClosed, 0
		}
		// A neutral probe leaves the breaker half-open for another probe.
		return
	}
	if b.state != BreakerClosed || neutral {
		return
	}
	if !failed {
		b.failed = 0
		return
	}
	b.failed++
	if b.failed >= b.failures {
		b.state, b.openedAt, b.failed = BreakerOpen, b.now(), 0
	}
}

// State returns the breaker's state. An open breaker whose cooldown has
// passed reports BreakerHalfOpen: its next call is a probe.
func (b *Breaker) State() BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == BreakerOpen && b.now().Sub(b.openedAt) >= b.cooldown {
		return BreakerHalfOpen
	}
	return b.state
}

// Close closes the store.
func (b *Breaker) Close() error { return b.store.Close() }
