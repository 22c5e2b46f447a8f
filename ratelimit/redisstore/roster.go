package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/stack"
)

// RosterKey is the Redis key of the fleet roster under prefix: one sorted
// set, its own Cluster slot (hash tag {f:fleet}).
func RosterKey(prefix string) string { return prefix + ":{f:fleet}" }

// RosterOptions configure a RedisRoster.
type RosterOptions struct {
	// Key is the sorted set's key; "" means RosterKey("qg").
	Key string
	// Now, when set, supplies the time of every heartbeat instead of the
	// Redis server clock (TIME). It exists for tests that drive time; a
	// fleet must leave it nil so that every instance uses one clock.
	Now func() time.Time
}

// RedisRoster is a stack.Roster in one Redis sorted set: member = an
// instance's id, score = when its registration expires, in milliseconds
// on the Redis server's clock. Heartbeat is one script call that drops
// the expired members, renews its own and counts the rest, atomically;
// the set expires as a whole once no instance has renewed it for the
// longest TTL any instance uses, so an abandoned fleet leaves nothing.
//
// Scores are on the Redis clock, as decisions are (see RedisStore), so
// the instances' clocks need not agree; on a Cluster the set lives on one
// primary, whose clock alone counts.
//
// A RedisRoster does not own its client. It is safe for concurrent use.
type RedisRoster struct {
	client redis.UniversalClient
	key    string
	now    func() time.Time
}

var _ stack.Roster = (*RedisRoster)(nil)

// NewRedisRoster returns a roster on client, which stays the caller's.
func NewRedisRoster(client redis.UniversalClient, o RosterOptions) *RedisRoster {
	if o.Key == "" {
		o.Key = RosterKey("qg")
	}
	return &RedisRoster{client: client, key: o.Key, now: o.Now}
}

// heartbeatScript registers ARGV[1] for ARGV[2] ms from now (ARGV[3] ms
// since the epoch, or an empty string for the server clock) and returns the number of
// unexpired members. A member is expired when its score is <= now.
var heartbeatScript = redis.NewScript(`
local now
if ARGV[3] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[3])
end
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now))
redis.call('ZADD', KEYS[1], string.format('%.0f', now + ttl), ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return redis.call('ZCARD', KEYS[1])
`)

// Heartbeat registers id for ttl (rounded up to the millisecond) and
// returns the live count (see stack.Roster). Errors wrap
// ratelimit.ErrUnavailable.
func (r *RedisRoster) Heartbeat(ctx context.Context, id string, ttl time.Duration) (int, error) {
	if ttl <= 0 {
		return 0, fmt.Errorf("%w: roster TTL %v must be > 0", ratelimit.ErrInvalid, ttl)
	}
	ms := (ttl + time.Millisecond - 1) / time.Millisecond
	now := ""
	if r.now != nil {
		now = strconv.FormatInt(r.now().UnixMilli(), 10)
	}
	n, err := heartbeatScript.Run(ctx, r.client, []string{r.key}, id, int64(ms), now).Int64()
	if err != nil {
		return 0, ratelimit.Unavailable("heartbeat", err)
	}
	return int(n), nil
}

// Leave removes id from the roster.
func (r *RedisRoster) Leave(ctx context.Context, id string) error {
	if err := r.client.ZRem(ctx, r.key, id).Err(); err != nil {
		return ratelimit.Unavailable("leave", err)
	}
	return nil
}
