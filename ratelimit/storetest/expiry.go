package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

// RunExpiry checks on the real clock that a key whose time to live passes
// comes back exactly full, never fuller, under every algorithm. newStore
// receives time.Now as its clock. It uses limits of 2 units per 50 ms and
// takes well under a second per algorithm: it polls, with a deadline, rather
// than sleeping for fixed times.
func RunExpiry(t *testing.T, newStore NewStore) {
	const per = 50 * time.Millisecond
	for _, s := range specs(2, per) {
		t.Run(s.alg.String(), func(t *testing.T) {
			e := newEnv(t, func(t *testing.T, _ func() time.Time) ratelimit.Store {
				return newStore(t, time.Now)
			})
			// A call that runs late on a loaded machine may legitimately
			// see refilled capacity; only a store that overfills every
			// time fails.
			const rounds = 3
			for i := range rounds {
				if expiryRound(e, s, fmt.Sprintf("exp%d", i), per) {
					return
				}
			}
			t.Errorf("in all %d rounds the key took more than its capacity right after coming back full", rounds)
		})
	}
}

// expiryRound drains key name, polls until it is full again, keeps polling
// past its expiry, and reports whether it then admits exactly its capacity.
func expiryRound(e *env, s spec, name string, per time.Duration) bool {
	c := s.capacity()
	e.wantAllowed("drain", e.one(e.item(name, s, c)), true)
	full := ratelimit.Result{Allowed: true, Limit: c, Remaining: c}
	deadline := time.Now().Add(20 * per)
	var fullSince time.Time
	for {
		r := e.one(e.item(name, s, 0))
		if r.DecidedAt <= 0 {
			e.t.Fatalf("DecidedAt %d, want the store's time", r.DecidedAt)
		}
		r.DecidedAt = 0 // the store's own clock, not the env's
		if r.Remaining > c || r.Remaining < 0 {
			e.t.Fatalf("remaining %d outside [0, %d]", r.Remaining, c)
		}
		switch {
		case r == full && fullSince.IsZero():
			fullSince = time.Now()
		case r != full && !fullSince.IsZero():
			e.t.Fatalf("key was full, then %+v without anything taken", r)
		}
		// Past two periods of fullness every store has dropped the key.
		if !fullSince.IsZero() && time.Since(fullSince) > 2*per+10*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("key not back to full %v after draining (last %+v)", 20*per, r)
		}
		time.Sleep(per / 10)
	}
	if r := e.one(e.item(name, s, c)); !r.Allowed {
		e.t.Fatalf("taking the capacity of a full key: %+v", r)
	}
	return !e.one(e.item(name, s, 1)).Allowed
}
