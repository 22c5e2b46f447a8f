package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/lease"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// clockedFleet is n leasing instances on a fresh Redis, on a fake clock
// set to the returned t0.
func clockedFleet(t *testing.T, n int) (*leaseFleet, time.Time) {
	t.Helper()
	srv := redistest.StartStandalone(t)
	clock := &storetest.Clock{}
	t0 := time.Unix(1_700_000_000, 0)
	clock.Set(t0)
	return newLeaseFleet(t, srv.Addr, n, clock), t0
}

// autoLeased returns a token-bucket item with an auto lease.
func autoLeased(key string, rate, burst int64, per time.Duration, cost int64, ttl time.Duration, instances int) ratelimit.Item {
	it := tb(key, rate, burst, per, cost)
	it.Lease = ratelimit.Lease{Auto: true, TTL: ttl, Instances: instances}
	return it
}

// TestLeaseAutoColdKeyPassesThrough: a key asked once per TTL never makes
// a block pay off (its demand per TTL stays about 1.6 requests), so every
// decision goes to the store unleased and nothing is held, and Remaining
// is the store's exact one.
func TestLeaseAutoColdKeyPassesThrough(t *testing.T) {
	f, _ := clockedFleet(t, 1)
	l, clock := f.inst[0], f.clock
	it := autoLeased(redistest.KeyPrefix(t)+"{cold}:tenant", 1, 100, time.Hour, 1, time.Second, 1)
	for i := range 20 {
		d := mustDecide(t, l, it)
		if !d.Allowed || d.Results[0].Remaining != int64(100-1-i) {
			t.Fatalf("decision %d: %+v, want allowed with the store's remaining %d", i, d, 100-1-i)
		}
		if held := l.Held(it.Key); held != 0 {
			t.Fatalf("decision %d: holds %d units of a cold key", i, held)
		}
		clock.Set(clock.Now().Add(time.Second))
	}
	if st := l.Stats(); st.Reservations != 0 || st.AutoPassed != 20 || st.LocalAdmits != 0 {
		t.Fatalf("stats %+v, want 20 passed through and no reservation", st)
	}
}

// TestLeaseAutoEngagesAndReleases: at one instant (an unbounded rate), the
// fourth decision of a key engages its lease with a block of its demand
// (4 units), later blocks follow the demand up to burst/(2×instances);
// once the key has been quiet long enough for its demand to decay below
// 2 requests per TTL, its decisions go to the store again and the sweep
// gives back what was held.
func TestLeaseAutoEngagesAndReleases(t *testing.T) {
	f, _ := clockedFleet(t, 1)
	l, clock := f.inst[0], f.clock
	const ttl = time.Second
	it := autoLeased(redistest.KeyPrefix(t)+"{hot}:tenant", 1, 1000, time.Hour, 1, ttl, 5) // cap 1000/10 = 100

	for range 3 {
		mustDecide(t, l, it)
	}
	if st := l.Stats(); st.AutoPassed != 3 || st.Reservations != 0 {
		t.Fatalf("after 3 decisions: %+v, want all 3 passed through", st)
	}
	mustDecide(t, l, it) // demand 4: a block of 4, one admitted
	if held := l.Held(it.Key); held != 3 {
		t.Fatalf("the engaging decision left %d held, want 3 of a block of 4", held)
	}
	for range 200 {
		mustDecide(t, l, it)
	}
	if held := l.Held(it.Key); held > 100 {
		t.Fatalf("holds %d, more than burst/(2×5) = 100", held)
	}
	if got, want := f.remaining(t, it)+l.Held(it.Key), int64(1000-204); got != want {
		t.Fatalf("bucket + held = %d, want %d: every unit admitted or held, none lost", got, want)
	}
	st := l.Stats()
	t.Logf("204 decisions: %+v", st)
	if st.Reservations > 10 {
		t.Fatalf("%d reservations for 201 leased decisions: the blocks did not follow the demand", st.Reservations)
	}

	// Quiet for 6 TTLs: the demand of 204 requests has decayed by e^-6 to
	// 0.5, below 2 with this decision; the held block expired. The
	// decision passes through, the sweep returns what was held.
	clock.Set(clock.Now().Add(6 * ttl))
	held := l.Held(it.Key)
	passed := st.AutoPassed
	mustDecide(t, l, it)
	if got := l.Stats().AutoPassed; got != passed+1 {
		t.Fatalf("after going quiet: passed %d -> %d, want one more", passed, got)
	}
	if n, err := l.ReturnExpired(t.Context()); err != nil || n != held {
		t.Fatalf("returned %d, %v; want the %d held", n, err, held)
	}
	if got, want := f.remaining(t, it), int64(1000-205); got != want || l.Held(it.Key) != 0 {
		t.Fatalf("after the return: bucket %d (want %d), held %d", got, want, l.Held(it.Key))
	}
}

// TestLeaseAutoExactFleetLimit: three instances with auto leases on one
// bucket of 600 (no refill) admit exactly 600 between them, counting what
// they still hold, and never more.
func TestLeaseAutoExactFleetLimit(t *testing.T) {
	f, _ := clockedFleet(t, 3)
	it := autoLeased(redistest.KeyPrefix(t)+"{acme}:tenant", 1, 600, time.Hour, 1, time.Second, 3)
	admitted := hammer(t, f, 4, 150, it)
	held := f.held(it.Key)
	if admitted > 600 || admitted+held != 600 {
		t.Fatalf("admitted %d, held %d: want admitted + held = 600", admitted, held)
	}
	for _, l := range f.inst {
		admitted += drain(t, l, it)
	}
	if admitted != 600 || f.held(it.Key) != 0 {
		t.Fatalf("after draining: admitted %d, held %d; want 600, 0", admitted, f.held(it.Key))
	}
	var local int64
	for _, l := range f.inst {
		local += l.Stats().LocalAdmits
	}
	if local < 400 {
		t.Fatalf("only %d of 600 admissions came from blocks", local)
	}
}

// TestLeaseAutoHotKeyAfterSpray: distinct keys asked once (a caller
// spraying API keys) take no room in the auto table; keys asked twice
// fill it to its bound and no further; a hot key asked after them is
// still leased, so that 200 of its decisions cost a few script calls
// instead of 200 (counted in INFO commandstats).
func TestLeaseAutoHotKeyAfterSpray(t *testing.T) {
	srv := redistest.StartStandalone(t)
	clock := &storetest.Clock{}
	clock.Set(time.Unix(1_700_000_000, 0))
	r := redisstore.NewRedisStore(redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{srv.Addr}}),
		redisstore.RedisOptions{Now: clock.Now, Timeout: 2 * time.Second})
	l := lease.New(r, lease.Options{Now: clock.Now, SweepEvery: -1, AutoKeys: 64})
	t.Cleanup(func() { _ = l.Close() })
	// The bound is AutoKeys rounded up to a multiple of the shards (at
	// most 256 of them).
	const bound = 64 + 256
	prefix := redistest.KeyPrefix(t)
	spray := func(name string, times int) {
		for i := range 600 {
			it := autoLeased(fmt.Sprintf("%s{%s%d}:tenant", prefix, name, i), 1, 100, time.Hour, 1, time.Second, 1)
			for range times {
				if d := mustDecide(t, l, it); !d.Allowed {
					t.Fatalf("spray key %s denied", it.Key)
				}
			}
		}
	}
	spray("once", 1)
	if st := l.Stats(); st.AutoKeys > 6 || st.Reservations != 0 {
		t.Fatalf("after 600 keys asked once: %+v, want (almost) none tracked and nothing reserved", st)
	}
	spray("twice", 2)
	if st := l.Stats(); st.AutoKeys < 64 || st.AutoKeys > bound || st.Reservations != 0 {
		t.Fatalf("after 600 keys asked twice: %+v, want the table full (64 to %d keys) and nothing reserved", st, bound)
	}

	hot := autoLeased(prefix+"{hot}:tenant", 1, 1_000_000, time.Hour, 1, time.Second, 1)
	_, c0, _ := commandCalls(t, srv)
	for i := range 200 {
		if d := mustDecide(t, l, hot); !d.Allowed {
			t.Fatalf("hot decision %d denied: %+v", i, d)
		}
	}
	_, c1, _ := commandCalls(t, srv)
	st := l.Stats()
	t.Logf("200 hot decisions: %d script calls; %+v", c1-c0, st)
	if c1-c0 > 20 || st.LocalAdmits < 180 {
		t.Fatalf("200 hot decisions cost %d script calls, %d admitted locally: the hot key was not leased", c1-c0, st.LocalAdmits)
	}
	if st.AutoKeys > bound || st.AutoEvicted == 0 {
		t.Fatalf("%+v: want at most %d keys tracked, one evicted for the hot key", st, bound)
	}
}
