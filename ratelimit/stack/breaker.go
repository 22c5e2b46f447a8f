package stack

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

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
	// Partition names the failure domain a batch depends on, such as the
	// Redis Cluster primary that owns its keys; each domain gets a breaker
	// state of its own, so one dead primary does not fail the tenants of the
	// others. nil means one domain for the whole store. It is called on
	// every Decide and must be cheap and safe for concurrent use; the number
	// of distinct names it returns must be bounded (the nodes of a cluster).
	// ctx is the Decide's: a lookup it makes must honour its deadline.
	Partition func(ctx context.Context, items []ratelimit.Item) string
	// Live, with Partition, reports whether the failure domain name
	// still exists: a Redis Cluster primary still in the slot map. A
	// domain it reports gone (a primary replaced by its replica after a
	// failover) is dropped and its state freed: State, States and
	// AllOpen leave it out from then on, and a later call in that name
	// starts a closed domain afresh, unless it comes within a minute
	// of the drop of a domain then open or half-open, which goes on
	// in that state (the name was missing only briefly). It is asked only about named
	// domains (never ""), whenever the domains are read (State, States,
	// AllOpen), not on Decide; it must be cheap and safe for concurrent
	// use. nil means every domain seen lives for the life of the breaker.
	Live func(name string) bool
	// Domains, with Partition, returns the names of every failure domain
	// the store has now (a Redis Cluster's primaries, from its slot map),
	// whether or not a call has gone there yet, or nil when it cannot
	// tell (no slot map read yet). With a non-empty answer, AllOpen is
	// true only when each of those domains is open: a domain no call has
	// reached counts as closed. It is asked only by AllOpen, which only
	// reads the slice (it may be shared); it must be cheap and safe for
	// concurrent use. nil means AllOpen judges the domains seen so far.
	Domains func() []string
}

// Breaker is a Store that stops calling a failing store for a while, so that
// a dead or hung Redis costs each request nothing instead of a full
// deadline.
//
// Closed, it passes calls through and counts consecutive failures (errors
// wrapping ErrUnavailable, except those caused by the caller cancelling its
// context); any success resets the count. At Failures it opens: Decide
// returns at once an error wrapping ErrUnavailable and ratelimit.ErrBreakerOpen. After
// Cooldown the next call is a probe that goes through (half-open): success
// closes the breaker, failure opens it for another Cooldown. ErrInvalid
// says nothing about the store's health and changes nothing.
//
// With BreakerOptions.Partition, all of this happens per failure domain.
//
// A Breaker is safe for concurrent use.
type Breaker struct {
	store     ratelimit.Store
	failures  int
	cooldown  time.Duration
	now       func() time.Time
	partition func(context.Context, []ratelimit.Item) string
	live      func(string) bool
	domains   func() []string

	mu    sync.Mutex
	cells map[string]*breakerCell
	only  *breakerCell // the single domain when partition is nil
	// gone holds the domains dropped while not closed, for breakerGoneKeep
	// (see drop).
	gone map[string]goneCell
}

// breakerGoneKeep is how long a domain dropped while open or half-open
// (see drop) keeps its state for a return of its name.
const breakerGoneKeep = time.Minute

// goneCell is the state of a dropped domain and when it was dropped.
type goneCell struct {
	c  *breakerCell
	at time.Time
}

// breakerCell is the state of one failure domain.
type breakerCell struct {
	mu       sync.Mutex
	state    BreakerState
	failed   int       // consecutive failures while closed
	openedAt time.Time // when the breaker last opened
	probing  bool      // a half-open probe is in flight
}

var _ ratelimit.Store = (*Breaker)(nil)

// NewBreaker returns a closed Breaker around s.
func NewBreaker(s ratelimit.Store, opts BreakerOptions) *Breaker {
	b := &Breaker{store: s, failures: opts.Failures, cooldown: opts.Cooldown, now: opts.Now,
		partition: opts.Partition, live: opts.Live, domains: opts.Domains, cells: map[string]*breakerCell{}, only: &breakerCell{},
		gone: map[string]goneCell{}}
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
func (b *Breaker) Decide(ctx context.Context, items []ratelimit.Item) (ratelimit.Decision, error) {
	var d ratelimit.Decision
	err := b.through(b.cell(ctx, items), func() (err error) {
		d, err = b.store.Decide(ctx, items)
		return err
	})
	return d, err
}

// Read calls the store with items, a read that decides nothing (see
// Stack.Read), only while their failure domain is closed: open or
// half-open, it returns at once an error wrapping ErrUnavailable and
// ratelimit.ErrBreakerOpen. Its outcome is not recorded: a failed read counts no
// failure, a successful one resets no count and closes nothing, and a read
// is never the half-open probe (decisions, and heartbeats through Do,
// probe). So reads, which no policy bounds, cannot open the breaker that
// decisions share, and a read finds out nothing that a decision has not.
func (b *Breaker) Read(ctx context.Context, items []ratelimit.Item) (ratelimit.Decision, error) {
	if b.stateOf(b.cell(ctx, items)) != BreakerClosed {
		return ratelimit.Decision{}, fmt.Errorf("%w: %w", ratelimit.ErrUnavailable, ratelimit.ErrBreakerOpen)
	}
	return b.store.Decide(ctx, items)
}

// Do runs op, a call to the breaker's store that is not a decision (a
// fleet heartbeat, see BreakerRoster), as if it were a decision of key:
// in key's failure domain, it returns at once an error wrapping
// ErrUnavailable and ratelimit.ErrBreakerOpen while the breaker is open, is the
// probe once the cooldown has passed, and its outcome counts as a
// decision's would (an error wrapping ErrUnavailable is a failure).
func (b *Breaker) Do(ctx context.Context, key string, op func(context.Context) error) error {
	return b.through(b.cell(ctx, []ratelimit.Item{{Key: key}}), func() error { return op(ctx) })
}

// through makes call unless c refuses it, and records its outcome in c.
func (b *Breaker) through(c *breakerCell, call func() error) error {
	ok, probe := b.admit(c)
	if !ok {
		return fmt.Errorf("%w: %w", ratelimit.ErrUnavailable, ratelimit.ErrBreakerOpen)
	}
	err := call()
	b.record(c, err, probe)
	return err
}

// cell returns the state of the failure domain of items.
func (b *Breaker) cell(ctx context.Context, items []ratelimit.Item) *breakerCell {
	if b.partition == nil {
		return b.only
	}
	name := b.partition(ctx, items)
	b.mu.Lock()
	defer b.mu.Unlock()
	c, ok := b.cells[name]
	if !ok {
		if g, ok := b.gone[name]; ok && b.now().Sub(g.at) < breakerGoneKeep {
			c = g.c
		} else {
			c = &breakerCell{}
		}
		delete(b.gone, name)
		b.cells[name] = c
	}
	return c
}

// each calls f with every domain's cell that counts (see counted).
func (b *Breaker) each(f func(*breakerCell)) {
	if b.partition == nil {
		f(b.only)
		return
	}
	for _, c := range b.counted() {
		f(c)
	}
}

// counted returns the cells of the domains seen so far, by name, without
// the domain "" while it is closed and another domain exists. A Partition
// names "" the calls whose domain it cannot tell yet (a Cluster whose slot
// map is not known); once it can, that domain is left from the first
// calls and says nothing about the store, so it neither keeps AllOpen
// false while every named domain is open nor shows in States. Open, it
// still counts: its calls are refused. A named domain that
// BreakerOptions.Live reports gone is dropped for good (see drop).
func (b *Breaker) counted() map[string]*breakerCell {
	b.mu.Lock()
	cells := make(map[string]*breakerCell, len(b.cells))
	for name, c := range b.cells {
		cells[name] = c
	}
	b.mu.Unlock()
	if b.live != nil {
		for name, c := range cells {
			if name != "" && !b.live(name) {
				delete(cells, name)
				b.drop(name, c)
			}
		}
	}
	if c, ok := cells[""]; ok && len(cells) > 1 && b.stateOf(c) == BreakerClosed {
		delete(cells, "")
	}
	return cells
}

// drop forgets the domain name if c is still its state. A call that took
// c just before records its outcome in c, which nothing reads any more.
//
// A domain dropped while open or half-open keeps its state aside for
// breakerGoneKeep: if a call names it again meanwhile, it goes on from
// that state rather than closed. A slot map read while a primary is
// briefly missing from it (a node answering with a partial view) would
// otherwise close the breaker of a primary that is down, and up to
// Failures calls would wait for it again.
func (b *Breaker) drop(name string, c *breakerCell) {
	c.mu.Lock()
	closed := c.state == BreakerClosed
	c.mu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cells[name] != c {
		return
	}
	delete(b.cells, name)
	now := b.now()
	for n, g := range b.gone {
		if now.Sub(g.at) >= breakerGoneKeep {
			delete(b.gone, n)
		}
	}
	if !closed {
		b.gone[name] = goneCell{c: c, at: now}
	}
}

// admit reports whether a call may go to the store, and whether it is the
// half-open probe.
func (b *Breaker) admit(c *breakerCell) (ok, probe bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state {
	case BreakerClosed:
		return true, false
	case BreakerOpen:
		if b.now().Sub(c.openedAt) < b.cooldown {
			return false, false
		}
		c.state = BreakerHalfOpen
	}
	if c.probing {
		return false, false
	}
	c.probing = true
	return true, true
}

// record updates the state with the outcome of a call that went through.
func (b *Breaker) record(c *breakerCell, err error, probe bool) {
	failed := errors.Is(err, ratelimit.ErrUnavailable) && !errors.Is(err, context.Canceled)
	neutral := err != nil && !failed // invalid items, or the caller left
	c.mu.Lock()
	defer c.mu.Unlock()
	if probe {
		c.probing = false
		switch {
		case failed:
			c.state, c.openedAt = BreakerOpen, b.now()
		case !neutral:
			c.state, c.failed = BreakerClosed, 0
		}
		// A neutral probe leaves the breaker half-open for another probe.
		return
	}
	if c.state != BreakerClosed || neutral {
		return
	}
	if !failed {
		c.failed = 0
		return
	}
	c.failed++
	if c.failed >= b.failures {
		c.state, c.openedAt, c.failed = BreakerOpen, b.now(), 0
	}
}

// stateOf reads one domain's state; an open domain whose cooldown has
// passed reports BreakerHalfOpen: its next call is a probe.
func (b *Breaker) stateOf(c *breakerCell) BreakerState {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == BreakerOpen && b.now().Sub(c.openedAt) >= b.cooldown {
		return BreakerHalfOpen
	}
	return c.state
}

// State returns the worst state over the failure domains: open if any is
// open, else half-open if any is, else closed.
func (b *Breaker) State() BreakerState {
	worst := BreakerClosed
	b.each(func(c *breakerCell) {
		switch st := b.stateOf(c); {
		case st == BreakerOpen:
			worst = BreakerOpen
		case st == BreakerHalfOpen && worst == BreakerClosed:
			worst = BreakerHalfOpen
		}
	})
	return worst
}

// States returns the state of each failure domain seen so far, by the name
// BreakerOptions.Partition gave it (a Redis Cluster primary's address),
// but those BreakerOptions.Live reports gone and the domain "" while it
// is closed and another exists (see counted); without Partition, the
// single domain is named "". An open domain whose cooldown has passed
// reports BreakerHalfOpen, as State does.
func (b *Breaker) States() map[string]BreakerState {
	if b.partition == nil {
		return map[string]BreakerState{"": b.stateOf(b.only)}
	}
	cells := b.counted()
	out := make(map[string]BreakerState, len(cells))
	for name, c := range cells {
		out[name] = b.stateOf(c)
	}
	return out
}

// AllOpen reports whether no decision can reach the store right now: with
// BreakerOptions.Domains answering, whether every domain it names is open
// (one that no call has reached is closed), so that one dead primary, the
// only one decided on so far, does not make a Cluster whose other
// primaries answer read all down; otherwise whether every failure domain
// seen so far is open (a closed domain "" and those BreakerOptions.Live
// reports gone aside, see counted).
func (b *Breaker) AllOpen() bool {
	if b.partition != nil && b.domains != nil {
		if names := b.domains(); len(names) > 0 {
			// Looked up one by one, not through counted: Stack asks on
			// every Release and Renew, and the names Domains gives are
			// live, so there is nothing to drop and no map to copy.
			for _, name := range names {
				b.mu.Lock()
				c, ok := b.cells[name]
				b.mu.Unlock()
				if !ok || b.stateOf(c) != BreakerOpen {
					return false
				}
			}
			return true
		}
	}
	all, seen := true, false
	b.each(func(c *breakerCell) {
		seen = true
		if b.stateOf(c) != BreakerOpen {
			all = false
		}
	})
	return seen && all
}

// Close closes the store.
func (b *Breaker) Close() error { return b.store.Close() }

// Settle passes the settlements to the store below unless the breaker of
// their failure domain is open (then it fails with ratelimit.ErrBreakerOpen, wrapped
// in ErrUnavailable), and counts the outcome like a decision's.
func (b *Breaker) Settle(ctx context.Context, id string, items []ratelimit.Settlement) (bool, error) {
	its := make([]ratelimit.Item, len(items))
	for i := range items {
		its[i] = items[i].Item
	}
	c := b.cell(ctx, its)
	ok, probe := b.admit(c)
	if !ok {
		return false, fmt.Errorf("%w: %w", ratelimit.ErrUnavailable, ratelimit.ErrBreakerOpen)
	}
	applied, err := ratelimit.SettleVia(ctx, b.store, id, items)
	b.record(c, err, probe) // ErrNoSettle and ErrInvalid are neutral
	return applied, err
}

var _ ratelimit.Settler = (*Breaker)(nil)
