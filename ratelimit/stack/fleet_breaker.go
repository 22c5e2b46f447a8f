package stack

import (
	"context"
	"time"
)

// BreakerRoster returns a Roster whose calls go through breaker b as
// calls about key, the roster's key in b's store (see Breaker.Do): while
// b knows the store to be down (its breaker for key's failure domain is
// open), a heartbeat or a Leave fails at once with an error wrapping
// ErrUnavailable and ratelimit.ErrBreakerOpen instead of waiting out its timeout
// against a dead store, and the Fleet keeps the last live count it knew.
// Once the cooldown has passed, a heartbeat may be the probe that finds
// the store back (an instance that decides nothing still rejoins), and
// heartbeats go through again as soon as the breaker closes; a heartbeat
// that fails counts toward opening it, as a failed decision does.
func BreakerRoster(r Roster, b *Breaker, key string) Roster {
	return &breakerRoster{r: r, b: b, key: key}
}

type breakerRoster struct {
	r   Roster
	b   *Breaker
	key string
}

func (g *breakerRoster) Heartbeat(ctx context.Context, id string, ttl time.Duration) (int, error) {
	var n int
	err := g.b.Do(ctx, g.key, func(ctx context.Context) (err error) {
		n, err = g.r.Heartbeat(ctx, id, ttl)
		return err
	})
	return n, err
}

func (g *breakerRoster) Leave(ctx context.Context, id string) error {
	return g.b.Do(ctx, g.key, func(ctx context.Context) error { return g.r.Leave(ctx, id) })
}
