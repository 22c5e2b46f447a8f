package ratelimit

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisOptions configures a RedisStore.
type RedisOptions struct {
	// Timeout bounds each Decide: its script calls run under
	// context.WithTimeout(ctx, Timeout). Past it Decide returns an error
	// wrapping ErrUnavailable and context.DeadlineExceeded. The refunds and
	// evaluations that follow a denial get a Timeout of their own. 0 means
	// no timeout beyond ctx's.
	Timeout time.Duration
	// Now, when set, supplies the time of every decision instead of the
	// Redis server clock (TIME). It exists for tests that drive time; a
	// fleet must leave it nil so that every instance uses one clock.
	Now func() time.Time
}

// RedisStore is a Store that keeps state in Redis (standalone, Sentinel or
// Cluster), shared by every instance that uses the same Redis.
//
// Each key is one Redis hash, written only by the store's Lua script, with
// an expiry after which it is exactly a key at full capacity. Times come
// from the Redis server clock, so instances need not agree on time.
//
// The client must send decisions to primaries: with a cluster client keep
// ReadOnly, RouteByLatency and RouteRandomly false (NewRedisClient does).
// It should have ContextTimeoutEnabled set, or socket reads ignore the
// Decide deadline, and few or no retries (a retried decision may consume
// twice). NewRedisClient returns a client configured that way.
//
// A RedisStore is safe for concurrent use.
type RedisStore struct {
	client redis.UniversalClient
	opts   RedisOptions
}

var _ Store = (*RedisStore)(nil)

// NewRedisStore returns a store that decides with client, which it owns
// from then on: Close closes it.
func NewRedisStore(client redis.UniversalClient, opts RedisOptions) *RedisStore {
	return &RedisStore{client: client, opts: opts}
}

// Close closes the Redis client. Decide must not be called after.
func (s *RedisStore) Close() error { return s.client.Close() }

// group is the items of one hash tag, decided by one script call.
type group struct {
	tag string
	idx []int // indexes into the batch, in batch order
}

// groupItems splits items by hash tag, in the order of each tag's first
// item.
func groupItems(items []Item) []group {
	var groups []group
outer:
	for i, it := range items {
		tag := hashTag(it.Key)
		for g := range groups {
			if groups[g].tag == tag {
				groups[g].idx = append(groups[g].idx, i)
				continue outer
			}
		}
		groups = append(groups, group{tag: tag, idx: []int{i}})
	}
	return groups
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
// earlier ones take, as in MemoryStore. Groups are decided
// one after another in the order of their first item, and the first group
// that denies ends the batch: the groups admitted before it are refunded
// (one call each) and the groups after it are evaluated without consuming,
// so that every Result is reported. These follow-up calls are pipelined,
// run under a Timeout of their own and are not cancelled with ctx.
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
// A Decide that cannot complete returns an error wrapping ErrUnavailable;
// invalid items return an error wrapping ErrInvalid before Redis is
// contacted. If evaluating the groups after a denial fails, the Decision is
// still returned (it is a denial) and those groups' Results are reported
// as not allowed with nothing remaining.
func (s *RedisStore) Decide(ctx context.Context, items []Item) (Decision, error) {
	for i, it := range items {
		if err := ValidateItem(it); err != nil {
			return Decision{}, fmt.Errorf("item %d: %w", i, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return Decision{}, unavailable("decide", err)
	}
	dec := Decision{Allowed: true, Results: make([]Result, len(items))}
	if len(items) == 0 {
		return dec, nil
	}
	var nowUS int64
	useNow := s.opts.Now != nil
	if useNow {
		nowUS = s.opts.Now().UnixMicro()
	}
	groups := groupItems(items)

	cctx, cancel := withTimeout(ctx, s.opts.Timeout)
	defer cancel()
	replies := make([]groupReply, len(groups))
	denied := -1
	for g, gr := range groups {
		keys, args := scriptArgs(modeDecide, nowUS, useNow, items, gr.idx)
		v, err := decideScript.Run(cctx, s.client, keys, args...).Result()
		if err != nil {
			return Decision{}, unavailable("decide", withDeadline(cctx, err))
		}
		rep, err := parseReply(v, items, gr.idx)
		if err != nil {
			return Decision{}, err
		}
		replies[g] = rep
		if !rep.admitted {
			denied = g
			break
		}
	}
	if denied >= 0 {
		s.afterDenial(ctx, items, groups, replies, denied, nowUS, useNow)
	}
	for g, gr := range groups {
		for i, j := range gr.idx {
			if g < len(replies) && replies[g].results != nil {
				dec.Results[j] = replies[g].results[i]
			} else {
				dec.Results[j] = Result{Limit: Capacity(items[j].Algorithm, items[j].Limit)}
			}
		}
	}
	for j, r := range dec.Results {
		if !r.Allowed && !items[j].Shadow {
			dec.Allowed = false
			dec.RetryAfter = max(dec.RetryAfter, r.RetryAfter)
		}
	}
	return dec, nil
}

// afterDenial refunds the groups admitted before group denied and
// evaluates the groups after it, in one pipeline. Refunded groups report
// their Results as they were before consuming. Failures are absorbed: a
// failed refund loses its cost, a failed evaluation leaves its replies
// empty.
func (s *RedisStore) afterDenial(ctx context.Context, items []Item, groups []group, replies []groupReply, denied int, nowUS int64, useNow bool) {
	for g := range denied {
		replies[g].results = replies[g].before
	}
	if len(groups) == 1 {
		return
	}
	fctx, cancel := withTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
	defer cancel()
	type call struct {
		keys []string
		args []any
		cmd  *redis.Cmd
	}
	calls := make([]*call, len(groups))
	pipe := s.client.Pipeline()
	for g, gr := range groups {
		if g == denied {
			continue
		}
		mode, idx := modeEval, gr.idx
		if g < denied {
			// Refund exactly what was taken: the items that fitted and
			// cost something (a shadow item that did not fit took
			// nothing).
			mode, idx = modeRefund, nil
			for i, j := range gr.idx {
				if replies[g].results[i].Allowed && items[j].Cost > 0 {
					idx = append(idx, j)
				}
			}
			if len(idx) == 0 {
				continue
			}
		}
		c := &call{}
		c.keys, c.args = scriptArgs(mode, nowUS, useNow, items, idx)
		c.cmd = decideScript.EvalSha(fctx, pipe, c.keys, c.args...)
		calls[g] = c
	}
	_, _ = pipe.Exec(fctx)
	for g, gr := range groups {
		c := calls[g]
		if c == nil {
			continue
		}
		if redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
			// The script cache was flushed: run this one alone, which
			// loads the script again.
			c.cmd = decideScript.Run(fctx, s.client, c.keys, c.args...)
		}
		if g < denied {
			continue // a refund's reply carries nothing
		}
		v, err := c.cmd.Result()
		if err != nil {
			continue
		}
		if rep, err := parseReply(v, items, gr.idx); err == nil {
			replies[g] = rep
		}
	}
}
