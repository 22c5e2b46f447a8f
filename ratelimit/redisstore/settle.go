package redisstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/quotagate/quotagate/ratelimit"
)

// Settle applies the settlements (see ratelimit.Settler), one script call
// per hash tag, sent together. Each refund goes to what its reservation
// charged at its ReservedAt, a time on the clock the store decides with
// (the injected one, or the server's TIME of the node holding the key,
// which Result.DecidedAt reports). Each call is atomic: it applies every
// settlement of its tag, or none when the tag's marker key for id exists
// (it was settled within ratelimit.SettleWindow). The marker is the key
// P + "{tag}:settled:" + id, in the slot of the tag, with that time to
// live, where P is what precedes the hash tag in the group's first key
// (the gateway's key prefix, so that an ACL on it covers the marker).
//
// A call that fails is not retried here: it returns an error wrapping
// ErrUnavailable, and the caller may call Settle again with the same id,
// which applies only the groups that were not. A settlement whose key has
// no hash tag and contains "}" cannot have a marker in its slot: it is
// ErrInvalid.
func (s *RedisStore) Settle(ctx context.Context, id string, items []ratelimit.Settlement) (bool, error) {
	sub := make([]ratelimit.Item, 0, len(items))
	var at []int64 // per item of sub, its reservation's time
	for i, st := range items {
		if err := ratelimit.ValidateSettlement(st); err != nil {
			return false, fmt.Errorf("settlement %d: %w", i, err)
		}
		if strings.Contains(hashTag(st.Item.Key), "}") {
			return false, fmt.Errorf("settlement %d: %w: a key without hash tag must not contain '}'", i, ratelimit.ErrInvalid)
		}
		if st.Delta != 0 {
			it := st.Item
			it.Cost, it.Shadow, it.Lease = st.Delta, false, ratelimit.Lease{}
			sub = append(sub, it)
			at = append(at, st.ReservedAt)
		}
	}
	if id == "" {
		return false, fmt.Errorf("%w: empty settlement id", ratelimit.ErrInvalid)
	}
	if len(sub) == 0 {
		return false, nil
	}
	if err := ctx.Err(); err != nil {
		return false, ratelimit.Unavailable("settle", err)
	}
	nowUS, useNow := s.now()
	b := newBound(ctx, s.opts.Timeout)
	idx := make([]int, len(sub))
	groups := groupItems(sub, make([]group, len(sub)), idx)
	calls := make([]*scriptCall, len(groups))
	for g, gr := range groups {
		c := s.getCall(b)
		c.buildSettle(nowUS, useNow, sub, at, idx[gr.lo:gr.hi], markerKey(sub[idx[gr.lo]].Key, gr.tag, id), ratelimit.SettleWindow)
		calls[g] = c
	}
	vals, errs := s.exchange(calls)
	applied := false
	for g, err := range errs {
		if err != nil {
			return false, ratelimit.Unavailable("settle", withDeadline(b, err))
		}
		arr, ok := vals[g].([]any)
		if !ok || len(arr) != 1 {
			return false, fmt.Errorf("%w: settle replied %s", ratelimit.ErrUnavailable, replyShape(vals[g]))
		}
		switch arr[0] {
		case int64(1):
			applied = true
		case int64(0):
		default:
			return false, fmt.Errorf("%w: settle replied %s", ratelimit.ErrUnavailable, replyShape(arr))
		}
	}
	return applied, nil
}

// markerKey is the settlement marker of id for the group of key, whose
// hash tag is tag: in tag's slot, after what precedes the tag in key.
func markerKey(key, tag, id string) string {
	prefix := ""
	if i := strings.IndexByte(key, '{'); i >= 0 && hashTag(key) == tag && strings.HasPrefix(key[i:], "{"+tag+"}") {
		prefix = key[:i]
	}
	return prefix + "{" + tag + "}:settled:" + id
}
