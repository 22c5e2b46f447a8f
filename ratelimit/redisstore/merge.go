package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/ratelimit"
)

// Merged calls. A pipeline's plain decisions (the calls a Decide makes
// for its groups, marked merge) that may share a script call are sent as
// one merged call (see lua/merged.lua): Redis then pays the fixed cost of
// a script call once for all of them. Each decision still runs as if it
// were a call of its own, in pipeline order, and gets its own reply or
// error. Refunds, evaluations, settlements, reservations and renewals are
// never merged.
//
// Which calls may share a call depends on the client: on one server
// (standalone, or a Sentinel's primary) any; on a Cluster only calls of
// one hash slot (a script touches one slot); on any other client (a Ring)
// none. A call that may not merge ends the run of merged calls it would
// cut into, so that the calls of one slot keep their order. A merged call
// refused for its keys together is sent again apart (see sendApart).
//
// One difference from separate calls remains: at maxmemory with
// noeviction Redis refuses a script's write that may grow memory only
// while the script has written nothing, so a decision that follows one
// that wrote, in the same merged call, is written where alone it would
// fail with OOM (it is decided exactly; memory goes above maxmemory by the
// keys of one call's decisions).

const (
	// defaultMaxMerge is the most decisions of one merged call when
	// CoalesceOptions.MaxMerge is 0.
	defaultMaxMerge = 16
	// maxMergeArgs bounds the arguments (ARGV) of one merged call: a call
	// whose arguments would take a merged call past it starts another
	// (one larger alone is sent alone). The script copies each decision's
	// keys and arguments into tables of its own through unpack, and so
	// refuses a merged call with a count above 4000 (MAX_COUNT in
	// lua/merged.lua), far above this bound; the bound is the time one
	// script call holds the server and the size of the command (a
	// decision's arguments are its items' specs, under 200 bytes each, so
	// under 200 KB in all).
	maxMergeArgs = 1024
	// mergedHead is the number of a merged call's arguments before its
	// decisions': its mode and its number of decisions.
	mergedHead = 2
)

// mergeBy says which calls a client's pipelines may merge.
type mergeBy int8

const (
	mergeNone mergeBy = iota // no calls (a client that shards by key itself)
	mergeAll                 // any calls: one server
	mergeSlot                // calls of one hash slot: a Cluster
)

// mergeByOf returns how calls sent with client may merge.
func mergeByOf(client redis.UniversalClient) mergeBy {
	switch client.(type) {
	case *redis.Client:
		return mergeAll
	case *redis.ClusterClient:
		return mergeSlot
	}
	return mergeNone
}

// units returns what sendPipeline sends for live, the calls of a
// pipeline in order: each call as itself, except runs of calls that merge
// (at most maxMerge of them and maxMergeArgs arguments), each replaced by
// one merged call, at the place of its first call. The merged calls are
// owner's, reused from one pipeline to the next; live itself is returned
// when nothing merges.
func units(owner *scriptCall, live []*scriptCall, by mergeBy, maxMerge int) []*scriptCall {
	if by == mergeNone || maxMerge < 2 || len(live) < 2 {
		return live
	}
	out := owner.units[:0]
	used := 0 // owner.merged in use
	// open maps a slot to the unit (an index into out) that its next call
	// may join, when there is one; one server has one slot, 0.
	open := owner.open
	defer func() {
		clear(open)
	}()
	if by == mergeSlot && open == nil {
		open = map[uint16]int{}
		owner.open = open
	}
	var open0 = -1 // open[0] on one server, kept without a map
	for _, c := range live {
		var slot uint16
		if by == mergeSlot {
			slot = keySlot(c.keys[0])
		}
		at := open0
		if by == mergeSlot {
			if u, ok := open[slot]; ok {
				at = u
			} else {
				at = -1
			}
		}
		if !c.merge {
			at = -1
		} else if at >= 0 {
			u := out[at]
			calls, args := len(u.members), u.mergedArgs
			if calls == 0 {
				calls, args = 1, mergedHead+2+len(u.argv())
			}
			if calls < maxMerge && args+2+len(c.argv()) <= maxMergeArgs {
				if len(u.members) == 0 {
					// The run's first call becomes the first member of
					// a merged call.
					if used == len(owner.merged) {
						owner.merged = append(owner.merged, &scriptCall{})
					}
					m := owner.merged[used]
					used++
					m.members = append(m.members[:0], u)
					out[at], u = m, m
				}
				u.members = append(u.members, c)
				u.mergedArgs = args + 2 + len(c.argv())
				continue
			}
			at = -1
		}
		out = append(out, c)
		if c.merge {
			at = len(out) - 1
		}
		if by == mergeSlot {
			if at >= 0 {
				open[slot] = at
			} else {
				delete(open, slot)
			}
		} else {
			open0 = at
		}
	}
	for _, u := range out {
		if len(u.members) > 0 {
			u.buildMerged()
		}
	}
	owner.units = out
	return out
}

// buildMerged sets the EVALSHA arguments of the merged call m from its
// members (see lua/merged.lua).
func (m *scriptCall) buildMerged() {
	keys, args := 0, 3
	for _, c := range m.members {
		keys += len(c.keys)
	}
	args += keys + m.mergedArgs
	m.keys = m.keys[:0]
	m.args = append(resize(m.args, 0), "evalsha", decideSHA, keys)
	for _, c := range m.members {
		m.keys = append(m.keys, c.keys...)
		m.args = append(m.args, c.args[3:3+len(c.keys)]...)
	}
	m.args = append(m.args, modeMerged, len(m.members))
	for _, c := range m.members {
		argv := c.argv()
		m.args = append(m.args, len(c.keys), len(argv))
		m.args = append(m.args, argv...)
	}
}

// modeMerged is the mode (ARGV[1]) of a merged call.
const modeMerged = "m"

// deliver sets the replies of the members of the merged call m from its
// reply v or err, signals each member's done and releases m's hold on
// them. v is the members' replies one after another, each its length
// and its values, or -1 and its error (see lua/merged.lua). A reply of
// another shape fails every member with an error wrapping
// ErrUnavailable, as a malformed reply of a lone call does.
func (m *scriptCall) deliver(v any, err error) {
	arr, _ := v.([]any)
	if err == nil && !splitMerged(arr, m.members) {
		err = fmt.Errorf("%w: merged script call of %d decisions replied %s", ratelimit.ErrUnavailable, len(m.members), replyShape(v))
	}
	if err != nil {
		for _, c := range m.members {
			c.val, c.err = nil, err
		}
	}
	m.release()
}

// release signals the done of each member of the merged call m, whose
// replies are set, and releases m's hold on them.
func (m *scriptCall) release() {
	for _, c := range m.members {
		c.done <- struct{}{}
	}
	clear(m.members)
	m.members = m.members[:0]
	clear(m.args)
	m.args = m.args[:0]
}

// splitMerged sets the reply of each of calls from arr, the reply of
// their merged call, and reports whether arr has the shape it must
// have; when it does not, no call's reply is set.
func splitMerged(arr []any, calls []*scriptCall) bool {
	o := 0
	for range calls {
		n, ok := arrayInt(arr, o)
		switch {
		case !ok:
			return false
		case n == -1:
			if o+1 >= len(arr) {
				return false
			}
			if _, ok := arr[o+1].(error); !ok {
				return false
			}
			o += 2
		case n >= 0 && n <= int64(len(arr)-o-1):
			o += 1 + int(n)
		default:
			return false
		}
	}
	if o != len(arr) {
		return false
	}
	o = 0
	for _, c := range calls {
		n := arr[o].(int64)
		if n == -1 {
			c.val, c.err = nil, arr[o+1].(error)
			o += 2
			continue
		}
		c.val, c.err = arr[o+1:o+1+int(n):o+1+int(n)], nil
		o += 1 + int(n)
	}
	return true
}

// arrayInt returns arr[i] when it is an integer.
func arrayInt(arr []any, i int) (int64, bool) {
	if i >= len(arr) {
		return 0, false
	}
	n, ok := arr[i].(int64)
	return n, ok
}

// refusedTogether reports whether err, the error of a merged call, is a
// refusal of the keys it carries together, given before the script ran:
// while a Cluster slot migrates, ASK (the node lacks some of the keys) and
// TRYAGAIN (it holds some but not all), and CROSSSLOT (a server or proxy
// that requires one slot per call). Each decision alone may well run.
func refusedTogether(err error) bool {
	return redis.HasErrorPrefix(err, "ASK ") || redis.HasErrorPrefix(err, "TRYAGAIN") ||
		redis.HasErrorPrefix(err, "CROSSSLOT")
}

// sendApart sends again, as calls of their own in one pipeline, the
// members of the merged calls among sent whose commands (cmds) the server
// refused for the keys they carry together (see refusedTogether): nothing
// of them ran, and each decision gets what it would get alone, instead of
// failing for a key of another. It sets those members' replies and
// returns the indexes (into sent) of the merged calls it sent apart, to be
// released rather than delivered; nil when there are none. A CROSSSLOT
// from a client that merges any calls (the server, or a proxy in front of
// it, requires one slot per call) makes r merge only calls of one slot
// from then on, so that it is not refused again.
func sendApart(ctx context.Context, r *runner, sent []*scriptCall, cmds []*redis.Cmd) []int {
	var apart []int
	var members []*scriptCall
	for i, u := range sent {
		if err := cmds[i].Err(); len(u.members) > 0 && refusedTogether(err) {
			apart = append(apart, i)
			members = append(members, u.members...)
			if redis.HasErrorPrefix(err, "CROSSSLOT") {
				r.mergeBy.CompareAndSwap(int32(mergeAll), int32(mergeSlot))
			}
		}
	}
	if len(apart) == 0 {
		return nil
	}
	client := r.client
	again := make([]*redis.Cmd, len(members))
	pipe := client.Pipeline()
	for k, c := range members {
		again[k] = c.cmd(ctx, false)
		_ = pipe.Process(ctx, again[k])
	}
	_, err := pipe.Exec(ctx)
	stampUnanswered(again, err)
	recoverScript(ctx, client, members, again)
	for k, c := range members {
		c.val, c.err = again[k].Result()
	}
	return apart
}
