package redisstore

import (
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/lease"

	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisOptions configures a RedisStore.
type RedisOptions struct {
	// Timeout bounds each Decide: its script calls share a deadline of
	// Timeout from its start (or ctx's, when that is earlier), as if run
	// under context.WithTimeout(ctx, Timeout). Past it Decide returns an
	// error wrapping ErrUnavailable and context.DeadlineExceeded. The
	// refunds and evaluations that follow a denial get a Timeout of their
	// own. 0 means no timeout beyond ctx's.
	Timeout time.Duration
	// Now, when set, supplies the time of every decision instead of the
	// Redis server clock (TIME). It exists for tests that drive time; a
	// fleet must leave it nil so that every instance uses one clock.
	Now func() time.Time
	// Coalesce configures the batching of concurrent script calls into
	// pipelines; the zero value turns it on with its defaults.
	Coalesce CoalesceOptions
	// Logger receives the lines that say how decisions run: as a Redis
	// function (info), or as EVALSHA scripts because the server cannot or
	// will not run functions (warn), and as a function again when a later
	// try finds it can (info; tried at most once a minute). nil logs
	// nothing (so that benchmarks and tests that build many stores print
	// nothing).
	Logger *slog.Logger
}

// RedisStore is a Store that keeps state in Redis (standalone, Sentinel or
// Cluster), shared by every instance that uses the same Redis.
//
// Each key is one Redis hash (a sorted set of slots for Concurrency),
// written only by the store's Lua code (a Redis function library where the
// server runs functions, else an EVALSHA script: see RedisOptions.Logger),
// with an expiry after which it is
// exactly a key at full capacity. A key must keep one algorithm: a hash
// algorithm fails (ErrUnavailable) on a key that holds slots. Times come
// from the Redis server clock, so instances need not agree on time.
//
// The client must send decisions to primaries: with a cluster client keep
// ReadOnly, RouteByLatency and RouteRandomly false (NewRedisClient does).
// It should have ContextTimeoutEnabled set, or socket reads ignore the
// Decide deadline, and few or no retries (a retried decision may consume
// twice). NewRedisClient returns a client configured that way.
//
// Script calls of concurrent Decides are coalesced into pipelines unless
// RedisOptions.Coalesce.Disabled is set (see CoalesceOptions).
//
// A RedisStore is safe for concurrent use.
type RedisStore struct {
	client redis.UniversalClient
	opts   RedisOptions
	run    *runner
	co     *coalescer // nil when coalescing is disabled
	calls  callPool   // the script calls of every coalescer of the store

	// On a Cluster each primary gets a queue of its own, so that a dead or
	// frozen primary holds up only the calls bound for it, never a pipeline
	// shared with calls for healthy primaries.
	cluster *redis.ClusterClient
	nodeMu  sync.Mutex
	nodeCo  map[string]*coalescer
	// nodeQuit ends every node's queue, also one prune dropped while
	// calls waited in it; Close closes it (once, with nodeStop).
	nodeQuit chan struct{}
	nodeStop *sync.Once
	// slotsKnown is set once a lookup of a key's primary succeeded: the
	// Cluster client holds a slot map from then on, and a lookup reads it
	// without a round trip (go-redis refreshes it in the background).
	// Before, a lookup asks the seeds for it (CLUSTER SLOTS), one after
	// the other, each for up to its read timeout.
	slotsKnown atomic.Bool
	// prim is the set of primaries IsPrimary last read from the slot
	// map (nil before); primMu makes one caller at a time read it.
	prim   atomic.Pointer[primaries]
	primMu sync.Mutex
}

var (
	_ ratelimit.SlotStore = (*RedisStore)(nil)
	_ lease.Reserver      = (*RedisStore)(nil)
	_ ratelimit.Settler   = (*RedisStore)(nil)
)

// NewRedisStore returns a store that decides with client, which it owns
// from then on: Close closes it. It starts no goroutine. A Cluster client
// gets a hook that reads the slot map again after a node failed to
// answer (see slotReload), so that calls follow a failover at once.
func NewRedisStore(client redis.UniversalClient, opts RedisOptions) *RedisStore {
	s := &RedisStore{client: client, opts: opts, run: newRunner(client, opts.Logger)}
	if !opts.Coalesce.Disabled {
		s.co = newCoalescer(s.run, &s.run.one, opts.Coalesce)
		if cc, ok := client.(*redis.ClusterClient); ok {
			s.cluster, s.nodeCo = cc, map[string]*coalescer{}
			s.nodeQuit, s.nodeStop = make(chan struct{}), new(sync.Once)
		}
	}
	if cc, ok := client.(*redis.ClusterClient); ok {
		cc.AddHook(slotReload{cc: cc, known: &s.slotsKnown})
	}
	return s
}

// coalescerFor returns the queue of the primary that owns key (on a
// Cluster), or the store's one queue. b bounds the lookup of the owner.
func (s *RedisStore) coalescerFor(b bound, key string) *coalescer {
	if s.cluster == nil {
		return s.co
	}
	addr := s.primaryWithin(b, key)
	s.nodeMu.Lock()
	defer s.nodeMu.Unlock()
	c, ok := s.nodeCo[addr]
	if !ok {
		c = newCoalescer(s.run, s.run.modeFor(addr), s.opts.Coalesce)
		c.quit, c.stop = s.nodeQuit, s.nodeStop
		s.nodeCo[addr] = c
	}
	return c
}

// Primary returns the address of the Cluster primary that owns key, "" when
// the client is not a Cluster client or the owner is unknown (the slot map
// could not be loaded within ctx). It reads the client's slot map, loading
// it when it is stale.
func (s *RedisStore) Primary(ctx context.Context, key string) string {
	cc, ok := s.client.(*redis.ClusterClient)
	if !ok {
		return ""
	}
	node, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return ""
	}
	if !s.slotsKnown.Load() {
		// Stored once: a store on every decision would write the
		// cache line that every core's lookups read.
		s.slotsKnown.Store(true)
	}
	addr := node.Options().Addr
	s.notePrimary(addr)
	return addr
}

// KnownPrimary is Primary without a round trip: "" while the Cluster
// client has never had a slot map (no lookup has succeeded yet), where
// Primary would ask the seeds for one. It is for a caller that must not
// wait on Redis (the circuit breaker choosing a failure domain, which it
// does before it refuses a call).
func (s *RedisStore) KnownPrimary(ctx context.Context, key string) string {
	if !s.slotsKnown.Load() {
		return ""
	}
	return s.Primary(ctx, key)
}

// primaryWithin is Primary for a call under b: until the slot map is
// known, its lookup ends at b's deadline, so that a Cluster whose seeds
// do not answer costs a decision its own deadline, not a read timeout
// per seed.
func (s *RedisStore) primaryWithin(b bound, key string) string {
	if s.slotsKnown.Load() || !b.own {
		return s.Primary(b.ctx, key)
	}
	ctx, cancel := context.WithDeadline(b.ctx, b.at)
	defer cancel()
	return s.Primary(ctx, key)
}

// Close closes the Redis client. Decide must not be called after; a
// Decide still waiting in the queue returns an error wrapping
// ErrUnavailable.
func (s *RedisStore) Close() error {
	if s.co != nil {
		s.co.close()
	}
	if s.nodeStop != nil {
		// Also the queues that prune dropped, which nodeCo no longer holds.
		s.nodeStop.Do(func() { close(s.nodeQuit) })
	}
	return s.client.Close()
}

// exchange sends calls (through the queue, or alone when coalescing is
// disabled) and returns each one's reply or error. The calls share one
// bound. A call whose ctx or deadline ends first reports that error. The
// calls must not be touched after.
func (s *RedisStore) exchange(calls []*scriptCall) ([]any, []error) {
	vals, errs := make([]any, len(calls)), make([]error, len(calls))
	if s.co == nil {
		s.sendAlone(calls)
		for i, c := range calls {
			<-c.done
			vals[i], errs[i] = c.finish()
		}
		return vals, errs
	}
	queued := make([]*coalescer, len(calls))
	for i, c := range calls {
		co := s.coalescerFor(c.b, c.keys[0])
		if errs[i] = co.enqueue(c); errs[i] == nil {
			queued[i] = co
		} else {
			putCall(c)
		}
	}
	for i, c := range calls {
		if queued[i] != nil {
			vals[i], errs[i] = queued[i].wait(c)
		}
	}
	return vals, errs
}

// sendAlone sends calls from the calling goroutine (coalescing disabled)
// as one pipeline; on a Cluster as one pipeline per primary, one after
// the other, each in its primary's function mode (see fnMode).
func (s *RedisStore) sendAlone(calls []*scriptCall) {
	if !s.run.cluster {
		sendPipeline(calls[0], s.run, &s.run.one, calls, false)
		return
	}
	first := s.run.modeFor(s.primaryWithin(calls[0].b, calls[0].keys[0]))
	if len(calls) == 1 {
		// A decision of one hash tag group: no grouping to allocate for.
		sendPipeline(calls[0], s.run, first, calls, false)
		return
	}
	modes := []*fnMode{first}
	byMode := map[*fnMode][]*scriptCall{first: {calls[0]}}
	for _, c := range calls[1:] {
		m := s.run.modeFor(s.primaryWithin(c.b, c.keys[0]))
		if _, ok := byMode[m]; !ok {
			modes = append(modes, m)
		}
		byMode[m] = append(byMode[m], c)
	}
	for _, m := range modes {
		sendPipeline(byMode[m][0], s.run, m, byMode[m], false)
	}
}

// getCall returns an unused script call of s that will run under b.
func (s *RedisStore) getCall(b bound) *scriptCall { return s.calls.get(b) }

// call sends one script call for the items idx under b and returns its
// reply.
func (s *RedisStore) call(b bound, mode string, nowUS int64, useNow bool, items []ratelimit.Item, idx []int, want []int64) (any, error) {
	c := s.getCall(b)
	c.build(mode, nowUS, useNow, items, idx, want)
	if s.co == nil {
		s.sendAlone([]*scriptCall{c})
		<-c.done
		return c.finish()
	}
	return s.coalescerFor(c.b, c.keys[0]).do(c)
}

// group is the items of one hash tag, decided by one script call.
type group struct {
	tag    string
	lo, hi int // its items are idx[lo:hi] of groupItems's idx
}

// groupItems splits items by hash tag, in the order of each tag's first
// item. The groups are written to groups and the indexes of their items
// (into items, in batch order) laid out in idx, group after group; both
// must have room for len(items), so that callers can pass arrays of their
// own.
func groupItems(items []ratelimit.Item, groups []group, idx []int) []group {
	ng, n := 0, 0
outer:
	for i, it := range items {
		tag := hashTag(it.Key)
		for g := range ng {
			if groups[g].tag == tag {
				continue outer
			}
		}
		start := n
		for k := i; k < len(items); k++ {
			if k == i || hashTag(items[k].Key) == tag {
				idx[n] = k
				n++
			}
		}
		groups[ng] = group{tag: tag, lo: start, hi: n}
		ng++
	}
	return groups[:ng]
}

// hashTag returns the part of key that Redis Cluster hashes to pick a slot:
// the text between the first "{" and the next "}" when it is not empty,
// otherwise the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// Decide decides items (see Store).
//
// Items are grouped by hash tag; each group is one atomic script call that
// consumes every non-shadow cost of the group or none. Within a group,
// items of the same key are evaluated in order, each seeing the costs the
// earlier ones take, as in memstore.Store. Groups are decided
// one after another in the order of their first item, and the first group
// that denies ends the batch: the groups admitted before it are refunded
// (one call each) and the groups after it are evaluated without consuming,
// so that every Result is reported. These follow-up calls are sent
// together, run under a Timeout of their own and are not cancelled with
// ctx.
//
// The bound this gives, with the gateway ordering route and global policies
// before the tenant's group:
//
//   - It never admits more than a limit allows: a batch is admitted only if
//     every group admitted it.
//   - A request that a later group denies holds the costs it took from the
//     earlier groups (typically shared route or global buckets) for about
//     one round trip, until the refund lands; other requests deciding in
//     that instant may be denied by those costs.
//   - A refund that fails loses its cost: the key under-admits by at most
//     that cost until it refills or its window passes.
//   - A call that fails or times out is not retried (whether it consumed is
//     unknown) and earlier groups are not refunded, since the caller may
//     still serve the request under its failure policy: the costs taken are
//     at most the request's.
//
// With coalescing on, a group's call may share a pipeline with other
// Decides' calls; each call stays one atomic script, so this changes
// nothing above. A caller whose deadline passes while its call is queued
// or in flight returns at its deadline; the call is then either never sent
// or its outcome is unknown, as for any timeout.
//
// A Decide that cannot complete returns an error wrapping ErrUnavailable;
// invalid items return an error wrapping ErrInvalid before Redis is
// contacted. If evaluating the groups after a denial fails, the Decision is
// still returned (it is a denial) and those groups' Results are reported
// as not allowed with nothing remaining.
func (s *RedisStore) Decide(ctx context.Context, items []ratelimit.Item) (ratelimit.Decision, error) {
	for i, it := range items {
		if err := ratelimit.ValidateItem(it); err != nil {
			return ratelimit.Decision{}, fmt.Errorf("item %d: %w", i, err)
		}
	}
	d, _, err := s.decide(ctx, items, nil, false)
	return d, err
}

// DecideReserve is Decide with reservations: want[i] > items[i].Cost asks
// that item i, when the batch is admitted, take min(want[i], the whole units
// its key holds) units instead of its cost. Whether the item fits is still
// decided on its cost alone. taken[i] is the number of units item i
// consumed (0 for every item when the batch was denied). want[i] <= Cost
// (0 included) is a plain item.
//
// The items must have passed ratelimit.ValidateItem (the caller, such as a
// lease.Store, validates them once). Only non-shadow token-bucket items may
// reserve, and want[i] must not exceed the bucket's burst; otherwise, or if
// len(want) != len(items), the error wraps ErrInvalid. Refunds after a later group's denial give back
// everything a reserving item took.
func (s *RedisStore) DecideReserve(ctx context.Context, items []ratelimit.Item, want []int64) (ratelimit.Decision, []int64, error) {
	if err := validateReserve(items, want); err != nil {
		return ratelimit.Decision{}, nil, err
	}
	return s.decide(ctx, items, want, true)
}

// validateReserve checks the want of DecideReserve against its items.
func validateReserve(items []ratelimit.Item, want []int64) error {
	if len(want) != len(items) {
		return fmt.Errorf("%w: %d reservations for %d items", ratelimit.ErrInvalid, len(want), len(items))
	}
	for i, it := range items {
		w := want[i]
		switch {
		case w < 0:
			return fmt.Errorf("item %d: %w: negative reservation %d", i, ratelimit.ErrInvalid, w)
		case w <= it.Cost:
		case it.Algorithm != ratelimit.TokenBucket || it.Shadow:
			return fmt.Errorf("item %d: %w: only non-shadow token buckets reserve", i, ratelimit.ErrInvalid)
		case w > it.Limit.Burst:
			return fmt.Errorf("item %d: %w: reservation %d above burst %d", i, ratelimit.ErrInvalid, w, it.Limit.Burst)
		}
	}
	return nil
}

// Refund gives each item's Cost back to its key, one script call per hash
// tag, sent together: a token bucket gets the units back (never above its
// burst), a window loses them from its count if it is still current (see
// the package function Refund). A refund keeps each key's expiry. Items
// with Cost 0 are skipped. It is for units taken by an earlier decision and
// not used, such as the unused part of a reserved block.
//
// It returns the first failure, wrapping ErrUnavailable (that group's
// units may or may not have gone back; it is not retried), or ErrInvalid
// for an invalid item, before contacting Redis.
func (s *RedisStore) Refund(ctx context.Context, items []ratelimit.Item) error {
	var idx []int
	for i, it := range items {
		if err := ratelimit.ValidateItem(it); err != nil {
			return fmt.Errorf("item %d: %w", i, err)
		}
		if it.Cost > 0 {
			idx = append(idx, i)
		}
	}
	sub := make([]ratelimit.Item, len(idx))
	for k, i := range idx {
		sub[k] = items[i]
	}
	_, err := s.perGroup(ctx, modeRefund, sub)
	if err != nil {
		return ratelimit.Unavailable("refund", err)
	}
	return nil
}

// perGroup sends one script call in mode per hash tag of items, together,
// under one Timeout, and returns their replies, or the first failure.
func (s *RedisStore) perGroup(ctx context.Context, mode string, items []ratelimit.Item) ([]any, error) {
	if len(items) == 0 {
		return nil, nil
	}
	nowUS, useNow := s.now()
	b := newBound(ctx, s.opts.Timeout)
	var calls []*scriptCall
	gidx := make([]int, len(items))
	for _, gr := range groupItems(items, make([]group, len(items)), gidx) {
		c := s.getCall(b)
		c.build(mode, nowUS, useNow, items, gidx[gr.lo:gr.hi], nil)
		calls = append(calls, c)
	}
	vals, errs := s.exchange(calls)
	for _, err := range errs {
		if err != nil {
			return nil, withDeadline(b, err)
		}
	}
	return vals, nil
}

// now returns the injected time, if any.
func (s *RedisStore) now() (nowUS int64, useNow bool) {
	if s.opts.Now == nil {
		return 0, false
	}
	return s.opts.Now().UnixMicro(), true
}

// smallBatch is the batch size up to which decide keeps its working
// arrays on the stack.
const smallBatch = 8

// decide runs a validated batch; want is nil or DecideReserve's, and
// reserve says whether to return the units taken.
func (s *RedisStore) decide(ctx context.Context, items []ratelimit.Item, want []int64, reserve bool) (ratelimit.Decision, []int64, error) {
	if err := ctx.Err(); err != nil {
		return ratelimit.Decision{}, nil, ratelimit.Unavailable("decide", err)
	}
	dec := ratelimit.Decision{Allowed: true, Results: make([]ratelimit.Result, len(items))}
	var taken []int64
	if reserve {
		taken = make([]int64, len(items))
	}
	if len(items) == 0 {
		return dec, taken, nil
	}
	nowUS, useNow := s.now()
	var (
		groupBuf [smallBatch]group
		idxBuf   [smallBatch]int
		extBuf   [smallBatch]itemReply
	)
	groups, idx, ext := groupBuf[:], idxBuf[:], extBuf[:]
	if len(items) > smallBatch {
		groups, idx, ext = make([]group, len(items)), make([]int, len(items)), make([]itemReply, len(items))
	}
	groups = groupItems(items, groups, idx)

	b := newBound(ctx, s.opts.Timeout)
	denied := -1
	for g, gr := range groups {
		gi := idx[gr.lo:gr.hi]
		// The last group is never refunded: unless the caller reads what
		// it reserved, its reply need not say what a refund would.
		mode, short := modeDecide, g == len(groups)-1 && !reserve
		if short {
			mode = modeDecideShort
		}
		v, err := s.call(b, mode, nowUS, useNow, items, gi, want)
		if err != nil {
			return ratelimit.Decision{}, nil, ratelimit.Unavailable("decide", withDeadline(b, err))
		}
		admitted, err := parseReply(v, items, gi, dec.Results, ext, short)
		if err != nil {
			return ratelimit.Decision{}, nil, err
		}
		if !admitted {
			denied = g
			break
		}
	}
	if denied >= 0 {
		s.afterDenial(ctx, items, groups, idx, dec.Results, ext, denied, nowUS, useNow)
	} else if reserve {
		for j := range items {
			taken[j] = ext[j].taken
		}
	}
	return ratelimit.Summarize(items, dec.Results), taken, nil
}

// afterDenial refunds the groups admitted before group denied and
// evaluates the groups after it, sent together. groups and idx are
// groupItems's, res and ext hold the
// replies of the groups up to denied. Refunded groups report their Results
// as they were before consuming. Failures are absorbed: a failed refund
// loses its units, a failed evaluation leaves its items' Results not
// allowed, with nothing remaining.
func (s *RedisStore) afterDenial(ctx context.Context, items []ratelimit.Item, groups []group, idx []int, res []ratelimit.Result, ext []itemReply, denied int, nowUS int64, useNow bool) {
	for g, gr := range groups {
		for _, j := range idx[gr.lo:gr.hi] {
			switch {
			case g < denied:
				res[j] = ext[j].before
			case g > denied:
				res[j] = ratelimit.Result{Limit: ratelimit.Capacity(items[j].Algorithm, items[j].Limit)}
			}
		}
	}
	if len(groups) == 1 {
		return
	}
	b := newBound(context.WithoutCancel(ctx), s.opts.Timeout)
	// Refund exactly what was taken: for each item, the units its reply
	// says it consumed (a shadow item that did not fit took nothing; a
	// reserving item may have taken more than its cost).
	refund := make([]ratelimit.Item, len(items))
	copy(refund, items)
	var calls []*scriptCall
	callOf := make([]int, len(groups))
	for g, gr := range groups {
		callOf[g] = -1
		if g == denied {
			continue
		}
		mode, gi, its := modeEval, idx[gr.lo:gr.hi], items
		if g < denied {
			mode, gi, its = modeRefund, nil, refund
			for _, j := range idx[gr.lo:gr.hi] {
				if t := ext[j].taken; t > 0 {
					refund[j].Cost = t
					gi = append(gi, j)
				}
			}
			if len(gi) == 0 {
				continue
			}
		}
		c := s.getCall(b)
		c.build(mode, nowUS, useNow, its, gi, nil)
		callOf[g] = len(calls)
		calls = append(calls, c)
	}
	if len(calls) == 0 {
		return
	}
	vals, errs := s.exchange(calls)
	for g, gr := range groups {
		c := callOf[g]
		if c < 0 || g < denied || errs[c] != nil {
			continue // a refund's reply carries nothing
		}
		_, _ = parseReply(vals[c], items, idx[gr.lo:gr.hi], res, ext, false)
	}
}
