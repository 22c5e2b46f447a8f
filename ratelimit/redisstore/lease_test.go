package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/lease"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// leaseFleet is n instances, each a lease.Store over its own RedisStore and
// client, on one Redis. With a clock, the stores and the leases read it
// (and nothing sweeps in the background); without, Redis decides on its
// own clock and leases on time.Now.
type leaseFleet struct {
	inst  []*lease.Store
	plain *redisstore.RedisStore // for peeks, not leasing
	clock *storetest.Clock
}

func newLeaseFleet(t *testing.T, addr string, n int, clock *storetest.Clock) *leaseFleet {
	t.Helper()
	var now func() time.Time
	opts := lease.Options{}
	if clock != nil {
		now = clock.Now
		opts = lease.Options{Now: now, SweepEvery: -1}
	}
	f := &leaseFleet{clock: clock, plain: newRedisStore(t, []string{addr}, now, time.Second)}
	for range n {
		r := redisstore.NewRedisStore(redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{addr}}), redisstore.RedisOptions{Now: now, Timeout: 2 * time.Second})
		l := lease.New(r, opts)
		t.Cleanup(func() { _ = l.Close() })
		f.inst = append(f.inst, l)
	}
	return f
}

// remaining peeks at the key's bucket in Redis.
func (f *leaseFleet) remaining(t *testing.T, it ratelimit.Item) int64 {
	t.Helper()
	it.Cost, it.Lease = 0, ratelimit.Lease{}
	return mustDecide(t, f.plain, it).Results[0].Remaining
}

func (f *leaseFleet) held(key string) int64 {
	var n int64
	for _, l := range f.inst {
		n += l.Held(key)
	}
	return n
}

// leased returns a leased token-bucket item.
func leased(key string, rate, burst int64, per time.Duration, cost, maxBlock int64, ttl time.Duration, instances int) ratelimit.Item {
	it := tb(key, rate, burst, per, cost)
	it.Lease = ratelimit.Lease{MaxBlock: maxBlock, TTL: ttl, Instances: instances}
	return it
}

// hammer runs goroutines per instance, each deciding it calls times, and
// returns the number admitted.
func hammer(t *testing.T, f *leaseFleet, goroutines, calls int, items ...ratelimit.Item) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for _, l := range f.inst {
		for range goroutines {
			wg.Go(func() {
				for range calls {
					d, err := l.Decide(context.Background(), items)
					if err != nil {
						t.Errorf("Decide: %v", err)
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	return admitted.Load()
}

// drain decides it on l until a denial and returns the number admitted.
func drain(t *testing.T, l *lease.Store, it ratelimit.Item) int64 {
	t.Helper()
	var n int64
	for {
		if !mustDecide(t, l, it).Allowed {
			return n
		}
		n++
	}
}

// TestLeaseExactFleetLimit: three instances leasing one bucket of 600
// (no refill) concurrently admit exactly 600: never more, and every unit
// is either admitted or held in a block until the instances drain them.
func TestLeaseExactFleetLimit(t *testing.T) {
	srv := redistest.StartStandalone(t)
	clock := &storetest.Clock{}
	clock.Set(time.Unix(1_700_000_000, 0))
	f := newLeaseFleet(t, srv.Addr, 3, clock)
	it := leased(redistest.KeyPrefix(t)+"{acme}:tenant", 1, 600, time.Hour, 1, 50, time.Second, 3)

	admitted := hammer(t, f, 4, 150, it) // 600 calls per instance
	held := f.held(it.Key)
	if admitted > 600 || admitted+held != 600 {
		t.Fatalf("admitted %d, held %d: want admitted + held = 600", admitted, held)
	}
	if held > 3*50 {
		t.Fatalf("the fleet holds %d units, more than 3 blocks of 50", held)
	}
	for _, l := range f.inst {
		admitted += drain(t, l, it)
	}
	if admitted != 600 || f.held(it.Key) != 0 || f.remaining(t, it) != 0 {
		t.Fatalf("after draining: admitted %d, held %d, remaining %d; want 600, 0, 0", admitted, f.held(it.Key), f.remaining(t, it))
	}
	var st lease.Stats
	for _, l := range f.inst {
		s := l.Stats()
		st.LocalAdmits += s.LocalAdmits
		st.Reservations += s.Reservations
	}
	t.Logf("600 admitted: %d locally, %d leased items sent to Redis (denials included)", st.LocalAdmits, st.Reservations)
	if st.LocalAdmits < 500 {
		t.Fatalf("only %d of 600 admissions came from blocks", st.LocalAdmits)
	}
}

// TestLeaseHotKeyCommands: a hot key leased by three instances costs at
// most 0.05 script calls per admitted request, on the Redis clock and
// real time.
func TestLeaseHotKeyCommands(t *testing.T) {
	srv := redistest.StartStandalone(t)
	f := newLeaseFleet(t, srv.Addr, 3, nil)
	it := leased(redistest.KeyPrefix(t)+"{hot}:tenant", 1_000_000, 1_000_000, time.Second, 1, 50, time.Second, 3)
	storetest.WarmUp(t, f.plain, []ratelimit.Item{tb("{warm}k", 1, 1, time.Hour, 0)})
	_, s0, _ := commandCalls(t, srv)
	admitted := hammer(t, f, 4, 1000, it)
	_, s1, _ := commandCalls(t, srv)
	per := float64(s1-s0) / float64(admitted)
	t.Logf("%d admitted with %d script calls: %.4f per admitted request", admitted, s1-s0, per)
	if admitted != 12000 {
		t.Fatalf("admitted %d of 12000 on a bucket that cannot run out", admitted)
	}
	if per > 0.05 {
		t.Fatalf("%.4f script calls per admitted request, want <= 0.05", per)
	}
}

// TestLeaseBlockExpiry: a block's units go back to the key TTL after it
// was reserved, not before, and an expired block is not admitted from.
func TestLeaseBlockExpiry(t *testing.T) {
	f, t0 := clockedFleet(t, 1)
	l, clock := f.inst[0], f.clock
	const ttl = time.Second
	it := leased(redistest.KeyPrefix(t)+"{exp}:tenant", 1, 1000, time.Hour, 1, 50, ttl, 1)

	// The first decision reserves its cost alone (no rate known yet); the
	// second, at the same instant, sees a hot key and reserves a block.
	mustDecide(t, l, it)
	clock.Set(t0.Add(time.Millisecond))
	mustDecide(t, l, it)
	if got := l.Held(it.Key); got != 49 {
		t.Fatalf("held %d after a block of 50 was reserved and 1 admitted, want 49", got)
	}
	if got := f.remaining(t, it); got != 1000-2-49 {
		t.Fatalf("bucket has %d, want %d", got, 1000-2-49)
	}
	clock.Set(t0.Add(time.Millisecond + ttl - time.Microsecond))
	if n, err := l.ReturnExpired(context.Background()); err != nil || n != 0 {
		t.Fatalf("before the TTL: returned %d, %v; want 0", n, err)
	}
	clock.Set(t0.Add(time.Millisecond + ttl))
	if n, err := l.ReturnExpired(context.Background()); err != nil || n != 49 {
		t.Fatalf("at the TTL: returned %d, %v; want 49", n, err)
	}
	if got, want := f.remaining(t, it), int64(1000-2); got != want || l.Held(it.Key) != 0 {
		t.Fatalf("after the return: bucket %d (want %d), held %d", got, want, l.Held(it.Key))
	}

	// A decision after expiry sets the old block aside and reserves anew.
	mustDecide(t, l, it) // a new block
	held := l.Held(it.Key)
	res0 := l.Stats().Reservations
	clock.Set(clock.Now().Add(2 * ttl))
	mustDecide(t, l, it)
	if l.Stats().Reservations != res0+1 {
		t.Fatalf("a decision after expiry admitted from the expired block")
	}
	if n, err := l.ReturnExpired(context.Background()); err != nil || n < held {
		t.Fatalf("returned %d, %v; want at least the expired %d", n, err, held)
	}
	st := l.Stats()
	if st.ReturnedUnits < 49+held || st.LostUnits != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestLeaseUnderAdmissionBound: when one instance is denied, the units the
// others hold are at most (instances−1) × block, and once they give them
// back (Close) the denied instance admits exactly those units.
func TestLeaseUnderAdmissionBound(t *testing.T) {
	srv := redistest.StartStandalone(t)
	clock := &storetest.Clock{}
	clock.Set(time.Unix(1_700_000_000, 0))
	f := newLeaseFleet(t, srv.Addr, 3, clock)
	a, b, c := f.inst[0], f.inst[1], f.inst[2]
	// Block cap: min(80, 300/(2×3)) = 50.
	it := leased(redistest.KeyPrefix(t)+"{ua}:tenant", 1, 300, time.Hour, 1, 80, time.Second, 3)
	for _, l := range []*lease.Store{a, b} {
		mustDecide(t, l, it)
		mustDecide(t, l, it)
	}
	admitted := int64(4) + drain(t, c, it)
	others := a.Held(it.Key) + b.Held(it.Key)
	if others != 2*49 {
		t.Fatalf("a and b hold %d, want 2×49", others)
	}
	if others > 2*50 {
		t.Fatalf("the others hold %d, above the bound 2×50", others)
	}
	if admitted+others+c.Held(it.Key) != 300 {
		t.Fatalf("admitted %d + held %d != 300", admitted, others+c.Held(it.Key))
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := drain(t, c, it); got != others {
		t.Fatalf("after a and b closed, c admitted %d, want the %d they gave back", got, others)
	}
}

// TestLeaseAllOrNothing: when another item of the request denies, the
// units taken from a local block go back to it and the bucket is not
// charged, in the same hash tag and across tags; a reservation refunded
// after a later group denies gives back its whole block.
func TestLeaseAllOrNothing(t *testing.T) {
	srv := redistest.StartStandalone(t)
	clock := &storetest.Clock{}
	t0 := time.Unix(1_700_000_000, 0)
	clock.Set(t0)
	f := newLeaseFleet(t, srv.Addr, 1, clock)
	l := f.inst[0]
	prefix := redistest.KeyPrefix(t)
	ten := leased(prefix+"{aon}:tenant", 1, 1000, time.Hour, 1, 50, time.Second, 1)
	full := tb(prefix+"{aon}:route", 1, 1, time.Hour, 1)
	mustDecide(t, f.plain, full) // now empty
	other := tb(prefix+"{other}:route", 1, 1, time.Hour, 1)
	mustDecide(t, f.plain, other)

	mustDecide(t, l, ten)
	mustDecide(t, l, ten)
	held, rem := l.Held(ten.Key), f.remaining(t, ten)
	if held != 49 {
		t.Fatalf("held %d, want 49", held)
	}
	for _, deny := range [][]ratelimit.Item{{ten, full}, {full, ten}, {ten, other}, {other, ten}} {
		d := mustDecide(t, l, deny...)
		if d.Allowed {
			t.Fatalf("admitted %+v", d)
		}
		if l.Held(ten.Key) != held || f.remaining(t, ten) != rem {
			t.Fatalf("after a denial: held %d (want %d), bucket %d (want %d)", l.Held(ten.Key), held, f.remaining(t, ten), rem)
		}
	}

	// Empty the block, then a request whose reservation lands in the
	// tenant's group while the other group denies: nothing is kept.
	for range held {
		mustDecide(t, l, ten)
	}
	if l.Held(ten.Key) != 0 {
		t.Fatalf("block not empty")
	}
	rem = f.remaining(t, ten)
	for _, items := range [][]ratelimit.Item{{ten, other}, {ten, full}} {
		d := mustDecide(t, l, items...)
		if d.Allowed || !d.Results[0].Allowed {
			t.Fatalf("want the tenant to fit and the request denied: %+v", d)
		}
		if l.Held(ten.Key) != 0 || f.remaining(t, ten) != rem {
			t.Fatalf("after a denied reservation: held %d, bucket %d (want 0, %d)", l.Held(ten.Key), f.remaining(t, ten), rem)
		}
	}
}

// TestLeaseColdKeyHoldsNothing: a key used less than once per TTL reserves
// only each request's cost; shadow items and peeks are never leased.
func TestLeaseColdKeyHoldsNothing(t *testing.T) {
	srv := redistest.StartStandalone(t)
	clock := &storetest.Clock{}
	t0 := time.Unix(1_700_000_000, 0)
	clock.Set(t0)
	f := newLeaseFleet(t, srv.Addr, 1, clock)
	l := f.inst[0]
	prefix := redistest.KeyPrefix(t)
	cold := leased(prefix+"{cold}:tenant", 1000, 1000, time.Hour, 2, 50, time.Second, 1)
	for i := range 5 {
		clock.Set(t0.Add(time.Duration(i) * 10 * time.Second))
		if d := mustDecide(t, l, cold); !d.Allowed {
			t.Fatalf("denied %+v", d)
		}
		if h := l.Held(cold.Key); h != 0 {
			t.Fatalf("request %d: a cold key holds %d", i, h)
		}
	}
	shadow := leased(prefix+"{cold}:shadow", 1, 100, time.Hour, 1, 50, time.Second, 1)
	shadow.Shadow = true
	peek := leased(prefix+"{cold}:peek", 1, 100, time.Hour, 0, 50, time.Second, 1)
	for range 3 {
		mustDecide(t, l, shadow, peek)
	}
	if l.Held(shadow.Key) != 0 || f.remaining(t, shadow) != 97 || l.Held(peek.Key) != 0 || f.remaining(t, peek) != 100 {
		t.Fatalf("shadow or peek leased: held %d/%d", l.Held(shadow.Key), l.Held(peek.Key))
	}
}

// TestLeaseNeverOverAdmits: on the Redis clock with refill, three leasing
// instances never admit more than the bucket gave out: burst plus rate
// over the run.
func TestLeaseNeverOverAdmits(t *testing.T) {
	srv := redistest.StartStandalone(t)
	f := newLeaseFleet(t, srv.Addr, 3, nil)
	const rate, burst = 2000, 100
	it := leased(redistest.KeyPrefix(t)+"{refill}:tenant", rate, burst, time.Second, 1, 50, time.Second, 3)
	storetest.WarmUp(t, f.plain, []ratelimit.Item{tb("{warm}k", 1, 1, time.Hour, 0)})
	start := time.Now()
	admitted := hammer(t, f, 4, 300, it)
	elapsed := time.Since(start)
	held := f.held(it.Key)
	bound := burst + int64(rate*elapsed.Seconds()) + 1
	t.Logf("admitted %d, held %d in %v (bucket gave at most %d)", admitted, held, elapsed, bound)
	if admitted+held > bound {
		t.Fatalf("admitted %d + held %d > %d: over-admission", admitted, held, bound)
	}
}

// TestLeaseInvalid: leases on other algorithms, or with a bad TTL, are
// ErrInvalid before anything is taken.
func TestLeaseInvalid(t *testing.T) {
	srv := redistest.StartStandalone(t)
	f := newLeaseFleet(t, srv.Addr, 1, nil)
	bad := []ratelimit.Item{
		{Key: "{inv}w", Algorithm: ratelimit.FixedWindow, Limit: ratelimit.Limit{Rate: 5, Per: time.Second}, Cost: 1, Lease: ratelimit.Lease{MaxBlock: 5, TTL: time.Second}},
		leased("{inv}t", 1, 10, time.Second, 1, 5, 0, 1),
		leased("{inv}n", 1, 10, time.Second, 1, -1, time.Second, 1),
		leased("{inv}i", 1, 10, time.Second, 1, 5, time.Second, -2),
	}
	for _, it := range bad {
		if _, err := f.inst[0].Decide(context.Background(), []ratelimit.Item{it}); !errors.Is(err, ratelimit.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", it.Key, err)
		}
	}
}

// TestLeaseBlockFollowsFleet: a block is sized for the larger of the
// lease's instances and the live fleet size, read at each reservation, so
// the instances together still hold at most half the bucket as the fleet
// grows.
func TestLeaseBlockFollowsFleet(t *testing.T) {
	srv := redistest.StartStandalone(t)
	clock := &storetest.Clock{}
	clock.Set(time.Unix(1_700_000_000, 0))
	var size atomic.Int64
	r := redisstore.NewRedisStore(redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{srv.Addr}}),
		redisstore.RedisOptions{Now: clock.Now, Timeout: 2 * time.Second})
	l := lease.New(r, lease.Options{Now: clock.Now, SweepEvery: -1, Fleet: size.Load})
	t.Cleanup(func() { _ = l.Close() })
	for _, tc := range []struct {
		fleet     int64
		instances int
		held      int64
	}{
		{1, 1, 49}, // min(max_block 50, 100/2) - the cost just admitted
		{5, 1, 9},  // 100/(2×5) - 1
		{2, 4, 11}, // instances 4 is larger: 100/8 - 1
		{0, 0, 49}, // neither set: one instance
	} {
		size.Store(tc.fleet)
		it := leased(fmt.Sprintf("%s{f%d-%d}:tenant", redistest.KeyPrefix(t), tc.fleet, tc.instances), 1, 100, time.Hour, 1, 50, time.Second, tc.instances)
		// The first reservation takes the cost alone; the second, with no
		// time passed, sees an unbounded rate and takes a whole block.
		for range 2 {
			if !mustDecide(t, l, it).Allowed {
				t.Fatalf("fleet %d: denied", tc.fleet)
			}
		}
		if got := l.Held(it.Key); got != tc.held {
			t.Errorf("fleet %d, instances %d: holds %d, want %d", tc.fleet, tc.instances, got, tc.held)
		}
	}
}
