package redisstore

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// slotReload is a redis.Hook of a Cluster client that asks it to read the
// slot map again (CLUSTER SLOTS, in the background, one at a time and at
// most one more every 200ms, as go-redis does) after a command or a
// pipeline failed without a reply from Redis: a refused or dropped
// connection, a reply out of bounds, or no answer in time. It does so
// only once the client has a slot map (known): before, each lookup asks
// the seeds for one already, within its decision's deadline. go-redis reloads on MOVED, and
// otherwise once a minute; but a primary that is gone never answers
// MOVED, so without this the calls for its slots would keep going to it
// for up to a minute after its replica took over.
type slotReload struct {
	cc    *redis.ClusterClient
	known *atomic.Bool
}

func (h slotReload) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h slotReload) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.after(err)
		return err
	}
}

func (h slotReload) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.after(unreplied(err, cmds))
		return err
	}
}

// unreplied returns err, a pipeline's error, when it is not a reply from
// Redis, or else the first error of cmds that is not one; nil when every
// command got its reply.
func unreplied(err error, cmds []redis.Cmder) error {
	if err != nil && !replied(err) {
		return err
	}
	for _, c := range cmds {
		if e := c.Err(); e != nil && !replied(e) {
			return e
		}
	}
	return nil
}

// after reloads the slot map when err is a failure to reach a node: any
// error but a reply and the caller leaving.
func (h slotReload) after(err error) {
	if err != nil && h.known.Load() && !replied(err) && !errors.Is(err, context.Canceled) {
		h.cc.ReloadState(context.Background())
	}
}

// replied reports whether err is a reply from Redis (an error reply, or
// redis.Nil).
func replied(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}
