package redisstore_test

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// keyLives follows, for the keys a differential check wrote, when Redis
// expires each one: in real time, and when it would on the injected
// clock. Redis sets a key's time to live from the injected clock (a token
// bucket 1 µs short of full gets 1 ms, rounded up) but counts it down in
// real time, which runs on while the injected clock stands still. Once
// Redis has dropped a key before the injected clock reached its end, the
// memstore.Store may still hold it, and the stores may differ without a
// wrong answer.
type keyLives struct {
	client   redis.UniversalClient
	real     map[string]time.Time // latest real instant Redis expires the key
	injected map[string]time.Time // injected instant before which it would not
}

func newKeyLives(client redis.UniversalClient) *keyLives {
	return &keyLives{client: client, real: map[string]time.Time{}, injected: map[string]time.Time{}}
}

// note reads the time to live of keys, just written at injected time now.
// Keys without one (absent: full, or no expiry) are forgotten.
func (l *keyLives) note(keys []string, now time.Time) {
	ctx := context.Background()
	pipe := l.client.Pipeline()
	cmds := make([]*redis.DurationCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.PTTL(ctx, k)
	}
	_, _ = pipe.Exec(ctx)
	at := time.Now() // after Redis read the TTLs: the real ends are latest
	for i, k := range keys {
		ttl, err := cmds[i].Result()
		if err != nil || ttl <= 0 {
			delete(l.real, k)
			delete(l.injected, k)
			continue
		}
		// The TTL has run down since it was set: on the injected clock the
		// key would live at least ttl more.
		l.real[k], l.injected[k] = at.Add(ttl), now.Add(ttl)
	}
}

// outran returns a key that Redis has expired in real time while, on the
// injected clock at now, it would not have, or "".
func (l *keyLives) outran(now time.Time) string {
	at := time.Now()
	for k, end := range l.real {
		if !at.Before(end) && now.Before(l.injected[k]) {
			return k
		}
	}
	return ""
}
