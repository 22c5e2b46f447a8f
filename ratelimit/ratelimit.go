// Package ratelimit decides whether a unit of work fits a limit. It is the
// contract of the store stack: the vocabulary of a decision (Algorithm,
// Limit, Item, Result, Decision), the Store interface and its extensions
// (SlotStore, RenewReporter, Settler), and the algorithms themselves.
//
// It knows keys, costs, limits and time; it knows nothing of HTTP, routes or
// upstreams, and imports no other package of this module, so it can be used
// as a library on its own.
//
//   - Algorithms are pure functions of (state, now, cost, limit): see Apply,
//     Refund and Settle. They never read a clock. All time is integer
//     microseconds and all state is integer, so the embedded store and the
//     Redis scripts compute exactly the same answers.
//   - A Store keeps state per key and decides a batch of Items atomically.
//     The checks every Store shares are here too (ValidateItem,
//     ValidateSettle, CheckSlotItems, RenewWith), so each implementation
//     refuses the same input the same way.
//
// The stores and the layers around them are packages of their own, one per
// concept, each importing this package and nothing of ours above it:
//
//   - memstore: a Store that keeps every key in this process.
//   - redisstore: the fleet-wide Store in Redis (Lua scripts), the only
//     package that links a Redis client; its Open assembles a whole stack.
//   - lease: a Store over a redisstore-like Reserver that admits hot keys
//     from blocks of units this instance holds.
//   - stack: the layers that make a store a complete decision store
//     (Breaker, DenialCache, Fallback, Fleet) and Stack, their assembly.
//   - slotkeeper: holds and renews the concurrency slots of the requests in
//     flight.
//   - hotkeys: estimates which keys take the most decisions.
//   - local: the coarse per-instance stage (stage 1) on golang.org/x/time/rate.
//   - storetest: the conformance suite that every Store passes.
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Algorithm names a limiting algorithm. The zero value is invalid.
type Algorithm uint8

// The algorithms a Store can apply.
const (
	// TokenBucket holds up to Limit.Burst units and refills Limit.Rate units
	// every Limit.Per, continuously (fractions of a unit accrue exactly).
	TokenBucket Algorithm = iota + 1
	// FixedWindow admits at most Limit.Rate units per aligned window of
	// length Limit.Per (windows start at multiples of Per since the Unix epoch).
	FixedWindow
	// SlidingWindow counts units in Limit.Buckets buckets per window and
	// admits at most Limit.Rate units in any window of length Limit.Per,
	// exactly; it may deny while an exact sliding window of length Per
	// would admit, but never while one of length Per×(1+1/Buckets) would.
	// See applySlidingWindow for the proof.
	SlidingWindow
	// SlidingLog admits at most Limit.Rate units in any window of length
	// Limit.Per, exactly, by remembering each admission. Its Rate is bounded
	// by MaxSlidingLogRate because state grows with it.
	SlidingLog
	// Concurrency admits at most Limit.Max requests in flight at once: a
	// request that fits takes one slot, named by its Item.Holder, until it
	// is released or until Limit.Per passes without a renewal (see
	// SlotStore). Its cost is 1 to take a slot or 0 to ask without taking.
	Concurrency
)

// MaxSlidingLogRate is the largest Limit.Rate a SlidingLog limit may have:
// its state holds one entry per admitted request, and a Redis script that
// walks it must stay short.
const MaxSlidingLogRate = 1000

var algorithmNames = [...]string{
	TokenBucket:   "token_bucket",
	FixedWindow:   "fixed_window",
	SlidingWindow: "sliding_window",
	SlidingLog:    "sliding_log",
	Concurrency:   "concurrency",
}

// String returns the configuration name of a, such as "token_bucket".
func (a Algorithm) String() string {
	if a == 0 || int(a) >= len(algorithmNames) {
		return fmt.Sprintf("Algorithm(%d)", uint8(a))
	}
	return algorithmNames[a]
}

// Valid reports whether a is one of the defined algorithms.
func (a Algorithm) Valid() bool { return a != 0 && int(a) < len(algorithmNames) }

// ParseAlgorithm maps a configuration name to an Algorithm. The error says
// which names are known.
func ParseAlgorithm(name string) (Algorithm, error) {
	if i := slices.Index(algorithmNames[1:], name); i >= 0 {
		return Algorithm(i + 1), nil
	}
	return 0, fmt.Errorf("must be token_bucket, fixed_window, sliding_window, sliding_log or concurrency, got %q", name)
}

// MarshalText returns the configuration name of a; an invalid a is an error.
func (a Algorithm) MarshalText() ([]byte, error) {
	if !a.Valid() {
		return nil, fmt.Errorf("ratelimit: invalid %s", a)
	}
	return []byte(a.String()), nil
}

// UnmarshalText sets a from a configuration name (see ParseAlgorithm).
func (a *Algorithm) UnmarshalText(b []byte) error {
	v, err := ParseAlgorithm(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// OnError is what a stack.Fallback store does with an item when the store below
// it cannot decide. The zero value is invalid.
type OnError uint8

// The modes of OnError.
const (
	// OnErrorOpen allows the item: availability over the limit.
	OnErrorOpen OnError = iota + 1
	// OnErrorClosed refuses the request as unavailable (HTTP 503).
	OnErrorClosed
	// OnErrorLocal decides the item on this instance's share of its limit.
	OnErrorLocal
)

var onErrorNames = [...]string{
	OnErrorOpen:   "open",
	OnErrorClosed: "closed",
	OnErrorLocal:  "local",
}

// Valid reports whether m is one of the defined modes.
func (m OnError) Valid() bool { return m != 0 && int(m) < len(onErrorNames) }

// String returns the configuration name of m, such as "closed".
func (m OnError) String() string {
	if !m.Valid() {
		return fmt.Sprintf("OnError(%d)", uint8(m))
	}
	return onErrorNames[m]
}

// ParseOnError maps a configuration name (open, closed, local) to an OnError.
func ParseOnError(name string) (OnError, error) {
	if i := slices.Index(onErrorNames[1:], name); i >= 0 {
		return OnError(i + 1), nil
	}
	return 0, fmt.Errorf("must be open, closed or local, got %q", name)
}

// MarshalText returns the configuration name of m; an invalid m is an error.
func (m OnError) MarshalText() ([]byte, error) {
	if !m.Valid() {
		return nil, fmt.Errorf("ratelimit: invalid %s", m)
	}
	return []byte(m.String()), nil
}

// UnmarshalText sets m from a configuration name (see ParseOnError).
func (m *OnError) UnmarshalText(b []byte) error {
	v, err := ParseOnError(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// Limit is a quota.
type Limit struct {
	// Rate is the number of units granted per Per. Must be > 0, and 0 for
	// Concurrency.
	Rate int64
	// Per is the refill period (token bucket), the window length (window
	// algorithms) or the time a concurrency slot is held without a renewal
	// (Concurrency). Must be > 0; it is used at microsecond precision.
	Per time.Duration
	// Burst is the token bucket's capacity in units. Must be > 0 for
	// TokenBucket and 0 for the window algorithms, whose capacity is Rate.
	Burst int64
	// Buckets is the number N of buckets a SlidingWindow divides Per into;
	// 0 means DefaultBuckets. Must be in [0, MaxBuckets], and 0 for the
	// other algorithms. More buckets admit closer to Rate under steady load
	// (at least Rate×N/(N+1) per Per) and keep more state (N+1 counters).
	Buckets int
	// Max is the most slots held at once (Concurrency only; 0 for the
	// others). Must be in [1, MaxConcurrency].
	Max int64
	// Calendar, when set, aligns a FixedWindow's windows to local days,
	// weeks or months in place of Per (which must then be 0): see Calendar.
	Calendar Calendar
}

// Item is one key of a batch passed to Store.Decide.
type Item struct {
	// Key identifies the state. Keys that share a Redis hash tag ("{...}")
	// are decided in one atomic step; see Store.
	Key       string
	Algorithm Algorithm
	Limit     Limit
	// Cost is the number of units the request takes. 0 asks without
	// consuming. Must not exceed the limit's capacity (ErrInvalid).
	Cost int64
	// Shadow items are evaluated and reported but never deny the batch. A
	// shadow item consumes its cost only if it allows and the batch is admitted.
	Shadow bool
	// OnError is what a stack.Fallback does with the item when the store below
	// it cannot decide (OnErrorLocal decides it on stack.LocalShare of its
	// limit). Stores other than stack.Fallback ignore it.
	OnError OnError
	// Holder identifies, for a Concurrency item, the request that takes
	// the slot: it names the slot to release and renew (see SlotStore), so
	// it must be unique among the holders of the key, and not empty when
	// Cost is 1. Other algorithms ignore it.
	Holder string
	// Lease lets a lease.Store admit this item from a block of units that
	// its instance reserved ahead from the key's token bucket. Stores other
	// than lease.Store ignore it; so does lease.Store for shadow items and
	// items of cost 0. The zero value leases nothing.
	Lease Lease
	// Region, when Leased, makes the item one quota across regions,
	// decided on this region's grant (see Region).
	Region Region
}

// Lease describes how an instance may reserve blocks of a token-bucket
// key (see lease.Store). The zero value (MaxBlock 0, Auto false) leases
// nothing.
type Lease struct {
	// MaxBlock is the most units one instance holds reserved for the key
	// at once. A block is also at most Burst/(2×Instances), and never less
	// than the item's cost. Must be >= 0; 0 with Auto means no bound but
	// Burst/(2×Instances).
	MaxBlock int64
	// Auto leases the key only while this instance's own rate on it makes
	// a block pay off (see lease.Store, "Auto"); otherwise the item goes
	// to the store like an unleased one.
	Auto bool
	// TTL is how long a block may be used after it was reserved; the units
	// left in it then go back to the key. Must be > 0 when the lease is
	// Leased.
	TTL time.Duration
	// Instances is the number of instances expected to share the key;
	// 0 means 1. Must be >= 0.
	Instances int
}

// Leased reports whether l asks for leasing (always, or Auto).
func (l Lease) Leased() bool { return l.MaxBlock > 0 || l.Auto }

// check reports an invalid lease of an item of algorithm alg.
func (l Lease) Check(alg Algorithm) error {
	switch {
	case l.MaxBlock < 0:
		return fmt.Errorf("%w: lease max block %d is negative", ErrInvalid, l.MaxBlock)
	case !l.Leased():
		return nil
	case alg != TokenBucket:
		return fmt.Errorf("%w: only token_bucket items can be leased, not %s", ErrInvalid, alg)
	case l.TTL <= 0:
		return fmt.Errorf("%w: lease TTL %v must be > 0", ErrInvalid, l.TTL)
	case l.Instances < 0:
		return fmt.Errorf("%w: lease instances %d is negative", ErrInvalid, l.Instances)
	}
	return nil
}

// Result is the outcome for one Item.
type Result struct {
	// Allowed reports whether this item's cost fits its limit now,
	// regardless of the other items of the batch.
	Allowed bool
	// Fallback is the mode that decided this item when the store could not
	// (see Decision.Failure); 0 when the store decided.
	Fallback OnError
	// Limit is the capacity in units: Burst for a token bucket, Rate otherwise.
	Limit int64
	// Remaining is the whole number of units left after the decision
	// (after consumption if the batch was admitted), in [0, Limit].
	Remaining int64
	// RetryAfter is how long until Cost fits, exactly (rounded up to the
	// microsecond); 0 when Allowed.
	RetryAfter time.Duration
	// ResetAfter is how long until the key is back to its full capacity
	// if nothing else is consumed; 0 when it is full.
	ResetAfter time.Duration
	// Debt is the units the key owes beyond being empty, after a
	// settlement charged more than it held (see Settler): how far a token
	// bucket is below zero (rounded up to whole units), or a window's count
	// above its rate. Remaining is then 0. 0 when not in debt.
	Debt int64
	// DecidedAt is the time on the deciding store's clock at which it
	// decided this item, in µs since the Unix epoch: the injected clock
	// if the store has one, else its own (a Redis server's TIME, of the
	// node holding the key). It is what a settlement of a reservation
	// passes as Settlement.ReservedAt. 0 when no store decided the item
	// (a fallback's local decision, a lease's local block); a denial
	// answered from a cache keeps the time of the store's denial.
	DecidedAt int64
}

// Decision is the outcome of one Store.Decide call.
type Decision struct {
	// Allowed is true when every non-shadow item allowed; their costs (and
	// those of allowed shadow items) were then consumed. When false, nothing
	// was consumed.
	Allowed bool
	// Results holds one Result per Item, in the order of the items.
	Results []Result
	// RetryAfter is the longest RetryAfter among the non-shadow items that
	// denied; 0 when Allowed. When Unavailable, it is about the time until
	// the store is tried again.
	RetryAfter time.Duration
	// Failure is, in a decision of a stack.Fallback, the error of the store below
	// it, which could not decide; the items' OnError modes then decided
	// (see stack.Fallback). nil when the store decided.
	Failure error
	// Unavailable reports, with Failure, that a non-shadow item with
	// OnErrorClosed refused the batch: the caller should answer "try again
	// later" (HTTP 503), not "over the limit". Allowed is then false.
	Unavailable bool
}

// Summarize returns the Decision of results, results[i] being items[i]'s:
// Allowed unless a non-shadow item did not allow, RetryAfter the longest
// RetryAfter of such items. It is how every store folds its results.
func Summarize(items []Item, results []Result) Decision {
	d := Decision{Allowed: true, Results: results}
	for i := range results {
		d.Fold(results[i], items[i].Shadow)
	}
	return d
}

// fold adds an item's result to d (see Summarize); d must start Allowed.
func (d *Decision) Fold(r Result, shadow bool) {
	if !r.Allowed && !shadow {
		d.Allowed = false
		d.RetryAfter = max(d.RetryAfter, r.RetryAfter)
	}
}

// Store keeps limiter state and decides batches of items.
//
// Decide evaluates every item at the store's current time. Within one
// atomic group either every non-shadow item's cost is consumed or none is.
// memstore.Store decides a whole batch as one group. RedisStore forms one group
// per hash tag (the text between the first "{" and the next "}" of a key) and
// decides groups in the order of their first item, stopping at the first group
// that denies; groups it had already admitted are refunded (see
// RedisStore.Decide for the bound this gives).
//
// Implementations are safe for concurrent use. A Decide that fails returns an
// error wrapping ErrUnavailable (store unreachable, timed out, or its reply
// malformed; whether anything was consumed is then unknown, and the call must
// not be retried: only a Settler's Settle, which is idempotent, may be) or ErrInvalid (the items themselves are wrong). Decide
// honours ctx's deadline.
type Store interface {
	Decide(ctx context.Context, items []Item) (Decision, error)
	// Close releases the store's resources. Decide must not be called after.
	Close() error
}

// SlotStore is a Store that also releases and renews the concurrency slots
// its Decide took (items of algorithm Concurrency, each naming its Holder).
// memstore.Store and redisstore.RedisStore are SlotStores.
//
// A slot lives until it is released or until Limit.Per has passed on the
// store's clock since it was taken or last renewed; a holder that stops
// renewing (a crashed instance) thus loses its slots after Limit.Per.
type SlotStore interface {
	Store
	// Release frees the slot that each item's Holder holds in its key; a
	// slot no longer held (released, or expired) is nothing to free. Items
	// must be valid Concurrency items with a Holder (ErrInvalid otherwise).
	// A failure wraps ErrUnavailable; the slot then frees itself after
	// Limit.Per.
	Release(ctx context.Context, items []Item) error
	// Renew extends each slot still held by an item's Holder to Limit.Per
	// from the store's current time. A Holder whose slot is no longer held
	// (expired, or its key deleted or evicted) takes it back, to the same
	// expiry, when the key has room: fewer than Limit.Max live slots, its
	// expired ones not counted. When it has none (or holds another
	// algorithm's state) the slot is lost: its request runs on without it.
	// lost lists, in increasing order, the indexes of the items whose slot
	// was lost; an item that a failed part of the call concerned is never
	// among them, whatever the error. Renew is for the slots of requests
	// still running: a released slot would be taken back too. Items as for
	// Release.
	Renew(ctx context.Context, items []Item) (lost []int, err error)
}

// Renewal is what a renewal (see SlotStore.Renew) found of its items: the
// indexes, each in increasing order, of those whose slot was lost and of
// those whose slot it took back.
type Renewal struct {
	Lost, Retaken []int
}

// RenewReporter is a Slots whose renewals also report the slots they took
// back: RenewReport is Renew with the whole Renewal. memstore.Store, stack.Stack and
// redisstore.RedisStore are RenewReporters.
type RenewReporter interface {
	RenewReport(ctx context.Context, items []Item) (Renewal, error)
}

var (
	// ErrUnavailable means the store could not decide: the caller applies
	// its failure policy (open, closed -> HTTP 503, or local).
	ErrUnavailable = errors.New("ratelimit: store unavailable")
	// ErrInvalid means an item is malformed (unknown algorithm, non-positive
	// limit, cost above capacity, empty key). It is a programming or
	// configuration error, never a reason to deny a caller.
	ErrInvalid = errors.New("ratelimit: invalid item")
)

// ErrBreakerOpen means a stack.Breaker refused a Decide without calling its store,
// because the store failed repeatedly just before. Errors carrying it also
// wrap ErrUnavailable, so callers apply their failure policy as for any
// unavailable store.
var ErrBreakerOpen = errors.New("ratelimit: circuit breaker open")

// FailureKind names why a Decide failed, for metrics and logs: "breaker_open"
// (ErrBreakerOpen), "timeout" (context.DeadlineExceeded), "invalid"
// (ErrInvalid) or "unavailable" (anything else).
func FailureKind(err error) string {
	switch {
	case errors.Is(err, ErrBreakerOpen):
		return "breaker_open"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, ErrInvalid):
		return "invalid"
	}
	return "unavailable"
}

// Unavailable wraps err, a failure to reach or hear from a store during op
// (such as "decide"), in ErrUnavailable, keeping err in the chain so that
// context.DeadlineExceeded stays visible. An err already wrapping
// ErrUnavailable is returned as it is.
func Unavailable(op string, err error) error {
	if errors.Is(err, ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
}
