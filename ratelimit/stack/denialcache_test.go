package stack_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/memstore"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

var dcT0 = time.Unix(1_700_000_000, 0)

func newDenialCache(size int) (*stack.DenialCache, *storetest.CountingStore, *storetest.Clock) {
	clock := &storetest.Clock{}
	clock.Set(dcT0)
	inner := &storetest.CountingStore{Store: memstore.New(memstore.Options{Now: clock.Now})}
	return stack.NewDenialCache(inner, stack.DenialCacheOptions{Now: clock.Now, Size: size}), inner, clock
}

func decide(t *testing.T, s ratelimit.Store, items ...ratelimit.Item) ratelimit.Decision {
	t.Helper()
	d, err := s.Decide(context.Background(), items)
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	return d
}

func TestDenialCacheRepeatsDenialUntilRetry(t *testing.T) {
	c, inner, clock := newDenialCache(0)
	defer c.Close()
	fw := func(cost int64) ratelimit.Item {
		return ratelimit.Item{Key: "k", Algorithm: ratelimit.FixedWindow, Limit: ratelimit.Limit{Rate: 3, Per: 10 * time.Second}, Cost: cost}
	}
	if d := decide(t, c, fw(2)); !d.Allowed {
		t.Fatalf("first request denied: %+v", d)
	}
	clock.Set(dcT0.Add(2 * time.Second))
	if d := decide(t, c, fw(2)); d.Allowed || d.RetryAfter != 8*time.Second {
		t.Fatalf("over the limit: %+v, want a denial with RetryAfter 8s", d)
	}
	calls := inner.Calls()
	for _, at := range []time.Duration{2 * time.Second, 5 * time.Second, 10*time.Second - time.Microsecond} {
		clock.Set(dcT0.Add(at))
		for _, cost := range []int64{2, 3} {
			d := decide(t, c, fw(cost))
			if want := 10*time.Second - at; d.Allowed || d.RetryAfter != want || d.Results[0].RetryAfter != want {
				t.Errorf("at %v cost %d: %+v, want a denial with RetryAfter %v", at, cost, d, want)
			}
		}
	}
	if got := inner.Calls(); got != calls {
		t.Errorf("%d store calls while the denial lasted, want none", got-calls)
	}
	if got := c.LocalDenials(); got != 6 {
		t.Errorf("LocalDenials %d, want 6", got)
	}
	// A smaller cost is not covered by the denial: it asks the store (and fits).
	if d := decide(t, c, fw(1)); !d.Allowed || inner.Calls() != calls+1 {
		t.Errorf("smaller cost: %+v after %d calls, want allowed by the store", d, inner.Calls()-calls)
	}
	// Another batch shape, or another limit (a reload), asks the store.
	other := fw(2)
	other.Limit.Rate = 4
	decide(t, c, other)
	decide(t, c, fw(2), ratelimit.Item{Key: "j", Algorithm: ratelimit.FixedWindow, Limit: fw(0).Limit, Cost: 1})
	if got := inner.Calls(); got != calls+3 {
		t.Errorf("%d store calls for uncovered batches, want 3", got-calls)
	}
	// Once the denial has run out, the store decides again.
	clock.Set(dcT0.Add(10 * time.Second))
	if d := decide(t, c, fw(2)); !d.Allowed {
		t.Errorf("next window: %+v, want allowed", d)
	}
}

func TestDenialCacheInvalidate(t *testing.T) {
	c, inner, _ := newDenialCache(0)
	defer c.Close()
	tb := ratelimit.Item{Key: "k", Algorithm: ratelimit.TokenBucket, Limit: ratelimit.Limit{Rate: 1, Per: time.Minute, Burst: 1}, Cost: 1}
	decide(t, c, tb)
	decide(t, c, tb)
	decide(t, c, tb)
	if got := inner.Calls(); got != 2 {
		t.Fatalf("%d store calls, want 2 (the third answered locally)", got)
	}
	c.Invalidate("k")
	if c.Len() != 0 {
		t.Fatalf("Len %d after Invalidate, want 0", c.Len())
	}
	decide(t, c, tb)
	if got := inner.Calls(); got != 3 {
		t.Fatalf("%d store calls, want 3 (Invalidate sends the next to the store)", got)
	}
}

func TestDenialCacheIsBounded(t *testing.T) {
	c, _, _ := newDenialCache(3)
	defer c.Close()
	for i := range 10 {
		it := ratelimit.Item{Key: fmt.Sprint("k", i), Algorithm: ratelimit.FixedWindow, Limit: ratelimit.Limit{Rate: 1, Per: time.Minute}, Cost: 1}
		decide(t, c, it)
		decide(t, c, it)
		if c.Len() > 3 {
			t.Fatalf("Len %d after %d denied keys, want at most 3", c.Len(), i+1)
		}
	}
}

// TestDenialCacheEvictsSoonestFirst: a full cache drops the denial that
// runs out soonest, whatever the order of its map, so the same requests
// always leave the same denials remembered.
func TestDenialCacheEvictsSoonestFirst(t *testing.T) {
	for run := range 20 { // map order changes per map and per range
		c, inner, clock := newDenialCache(4)
		item := func(i int) ratelimit.Item {
			return ratelimit.Item{Key: fmt.Sprint("k", i), Algorithm: ratelimit.TokenBucket, Limit: ratelimit.Limit{Rate: 1, Per: time.Minute, Burst: 1}, Cost: 1}
		}
		for i := range 5 { // k0 runs out first, k4 last
			clock.Set(dcT0.Add(time.Duration(i) * time.Second))
			decide(t, c, item(i))
			decide(t, c, item(i))
		}
		for _, i := range []int{4, 3, 2, 1, 0} { // k0 last: its new denial evicts k1
			calls := inner.Calls()
			decide(t, c, item(i))
			if asked := inner.Calls() != calls; asked != (i == 0) {
				t.Fatalf("run %d: k%d asked the store: %v, want only k0 (the soonest to run out) dropped", run, i, asked)
			}
		}
		c.Close()
	}
}

// TestDenialCacheEvictsWithHeadroom: when full, the cache frees an eighth
// of its size at once, so a flood of distinct denied keys scans the map once
// per size/8 new keys rather than on every one; it never exceeds its size.
func TestDenialCacheEvictsWithHeadroom(t *testing.T) {
	const size = 80
	c, _, _ := newDenialCache(size)
	defer c.Close()
	deny := func(i int) {
		it := ratelimit.Item{Key: fmt.Sprint("k", i), Algorithm: ratelimit.FixedWindow, Limit: ratelimit.Limit{Rate: 1, Per: time.Minute}, Cost: 1}
		decide(t, c, it)
		decide(t, c, it)
	}
	for i := range size {
		deny(i)
	}
	if c.Len() != size {
		t.Fatalf("Len %d after %d denied keys, want %d", c.Len(), size, size)
	}
	deny(size)
	if want := size - size/8; c.Len() != want {
		t.Fatalf("Len %d after the first eviction, want %d (room for size/8 more)", c.Len(), want)
	}
	for i := size + 1; i < size+size/8; i++ {
		deny(i)
		if c.Len() > size {
			t.Fatalf("Len %d, above the size %d", c.Len(), size)
		}
	}
}

// TestDenialCacheShards: with the default size the keys are spread over
// shards. A batch denied under 64 keys (spread over them) is answered
// locally by any of them, and Invalidate of one forgets it under all; a
// flood of distinct denied keys from many goroutines never holds more than
// the size, keeps most of it, and still remembers the next denial.
func TestDenialCacheShards(t *testing.T) {
	c, inner, _ := newDenialCache(0)
	defer c.Close()
	lim := ratelimit.Limit{Rate: 1, Per: time.Minute}
	batch := make([]ratelimit.Item, 64)
	for i := range batch {
		batch[i] = ratelimit.Item{Key: fmt.Sprint("{acme}:p", i), Algorithm: ratelimit.FixedWindow, Limit: lim, Cost: 1}
	}
	decide(t, c, batch...)
	decide(t, c, batch...) // denied by the store: remembered under 64 keys
	if c.Len() != 64 {
		t.Fatalf("Len %d, want 64", c.Len())
	}
	calls := inner.Calls()
	if d := decide(t, c, batch...); d.Allowed || inner.Calls() != calls {
		t.Fatalf("repeat: %+v after %d store calls, want a local denial", d, inner.Calls()-calls)
	}
	c.Invalidate(batch[40].Key)
	if c.Len() != 0 {
		t.Fatalf("Len %d after Invalidate of one key of the batch, want 0 (forgotten under all 64)", c.Len())
	}
	decide(t, c, batch...)
	if inner.Calls() != calls+1 {
		t.Fatalf("after Invalidate: %d store calls, want 1", inner.Calls()-calls)
	}

	const workers, perWorker = 8, 4000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				it := ratelimit.Item{Key: fmt.Sprintf("{t%d-%d}:x", w, i), Algorithm: ratelimit.FixedWindow, Limit: lim, Cost: 1}
				if _, err := c.Decide(context.Background(), []ratelimit.Item{it}); err != nil {
					t.Error(err)
				}
				if _, err := c.Decide(context.Background(), []ratelimit.Item{it}); err != nil {
					t.Error(err)
				}
				if n := c.Len(); n > stack.DefaultDenialCacheSize {
					t.Errorf("Len %d, above the size %d", n, stack.DefaultDenialCacheSize)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := c.Len(); n < stack.DefaultDenialCacheSize*3/4 {
		t.Errorf("Len %d after %d denied keys, want most of the size %d kept", n, workers*perWorker, stack.DefaultDenialCacheSize)
	}
	it := ratelimit.Item{Key: "{late}:x", Algorithm: ratelimit.FixedWindow, Limit: lim, Cost: 1}
	decide(t, c, it)
	decide(t, c, it)
	calls = inner.Calls()
	if d := decide(t, c, it); d.Allowed || inner.Calls() != calls {
		t.Errorf("a key denied after the flood: %+v after %d store calls, want a local denial", d, inner.Calls()-calls)
	}
}

// TestDenialCacheMatchesStore decides the same random batches, with the
// clock moving both ways, on a store and on a DenialCache over an identical
// store: every verdict must be the same (the cache never admits and never
// denies what the store would admit), and a local denial's RetryAfter is
// never longer than the store's.
func TestDenialCacheMatchesStore(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		clock := &storetest.Clock{}
		clock.Set(dcT0)
		plain := memstore.New(memstore.Options{Now: clock.Now})
		defer plain.Close()
		c := stack.NewDenialCache(memstore.New(memstore.Options{Now: clock.Now}), stack.DenialCacheOptions{Now: clock.Now, Size: rapid.IntRange(1, 4).Draw(rt, "size")})
		defer c.Close()
		limits := map[ratelimit.Algorithm]ratelimit.Limit{
			ratelimit.TokenBucket:   {Rate: 3, Per: time.Second, Burst: 4},
			ratelimit.FixedWindow:   {Rate: 4, Per: time.Second},
			ratelimit.SlidingWindow: {Rate: 4, Per: time.Second, Buckets: 3},
			ratelimit.SlidingLog:    {Rate: 4, Per: time.Second},
		}
		now := dcT0
		for step := range rapid.IntRange(1, 80).Draw(rt, "steps") {
			// Time only moves forward here: the two stores clamp a clock that
			// goes back per key to the latest time each saw there, and the
			// cache's store does not see the batches the cache answered, so
			// after a step back they would disagree by as much as the step
			// (TestDenialCacheClockBack covers a clock that goes back).
			now = now.Add(time.Duration(rapid.Int64Range(0, 300_000).Draw(rt, "dt_us")) * time.Microsecond)
			clock.Set(now)
			items := make([]ratelimit.Item, rapid.IntRange(1, 2).Draw(rt, "items"))
			for i := range items {
				alg := rapid.SampledFrom([]ratelimit.Algorithm{ratelimit.TokenBucket, ratelimit.FixedWindow, ratelimit.SlidingWindow, ratelimit.SlidingLog}).Draw(rt, "alg")
				items[i] = ratelimit.Item{Key: fmt.Sprint(alg, rapid.IntRange(0, 2).Draw(rt, "key")), Algorithm: alg, Limit: limits[alg],
					Cost: rapid.Int64Range(0, 3).Draw(rt, "cost"), Shadow: rapid.IntRange(0, 5).Draw(rt, "shadow") == 0}
			}
			want, err1 := plain.Decide(context.Background(), items)
			got, err2 := c.Decide(context.Background(), items)
			if err1 != nil || err2 != nil {
				rt.Fatalf("errors %v %v", err1, err2)
			}
			if got.Allowed != want.Allowed {
				rt.Fatalf("step %d: cache %+v, store %+v", step, got, want)
			}
			// With a key twice in one batch, the store's RetryAfter is only a
			// lower bound (the wait for the first item it denies), so only
			// batches of distinct keys have a wait to compare.
			distinct := len(items) < 2 || items[0].Key != items[1].Key
			// A larger cost's wait extrapolated from a token bucket's
			// denial is rounded up twice: at most 1 µs over the store's.
			if !got.Allowed && (got.RetryAfter <= 0 || distinct && got.RetryAfter > want.RetryAfter+time.Microsecond) {
				rt.Fatalf("step %d: cached RetryAfter %v, store %v", step, got.RetryAfter, want.RetryAfter)
			}
		}
	})
}

// TestDenialCacheClockBack: a clock that went back before a denial was
// remembered does not let the cache answer from it (the time elapsed is
// unknown): the store decides, and the denial is answered from memory
// again once the clock is past it.
func TestDenialCacheClockBack(t *testing.T) {
	clock := &storetest.Clock{}
	clock.Set(dcT0)
	counted := &storetest.CountingStore{Store: memstore.New(memstore.Options{Now: clock.Now})}
	c := stack.NewDenialCache(counted, stack.DenialCacheOptions{Now: clock.Now})
	defer c.Close()
	items := []ratelimit.Item{{Key: "k", Algorithm: ratelimit.FixedWindow, Limit: ratelimit.Limit{Rate: 1, Per: time.Hour}, Cost: 1}}
	decide := func() ratelimit.Decision {
		t.Helper()
		d, err := c.Decide(context.Background(), items)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	clock.Set(dcT0.Add(time.Minute))
	if d := decide(); !d.Allowed {
		t.Fatalf("first request denied: %+v", d)
	}
	denied := decide() // remembered from here
	if denied.Allowed {
		t.Fatalf("second request admitted: %+v", denied)
	}
	calls := counted.Calls()
	clock.Set(dcT0.Add(time.Minute - time.Second)) // back before the denial
	if d := decide(); d.Allowed || counted.Calls() != calls+1 {
		t.Errorf("clock back: allowed %v, store calls %d, want a denial by the store (%d calls)", d.Allowed, counted.Calls(), calls+1)
	}
	clock.Set(dcT0.Add(time.Minute + time.Second))
	d := decide()
	if want := denied.RetryAfter - time.Second; d.Allowed || counted.Calls() != calls+1 || d.RetryAfter != want {
		t.Errorf("clock forward again: %+v after %d store calls, want a local denial, RetryAfter %v, %d calls", d, counted.Calls(), want, calls+1)
	}
}

// TestDenialCacheProbeOfBatchOverKeys: a batch denied under two keys (or
// one key twice) is kept under each; when its denial runs out, the one
// request that finds it so is the probe and reaches the store, rather than
// holding itself back under the batch's next key, and once the probe is
// admitted the denial is forgotten under every key, so the next request
// is not held back either. TestDenialCacheMatchesStore found the first
// (the cache refused for ProbeWait what the store admitted).
func TestDenialCacheProbeOfBatchOverKeys(t *testing.T) {
	for _, tc := range []struct {
		keys [2]string
		rate int64 // room for one batch of cost 3+3 per window, not two
	}{{[2]string{"a", "b"}, 4}, {[2]string{"a", "a"}, 8}} {
		t.Run(tc.keys[0]+tc.keys[1], func(t *testing.T) {
			c, inner, clock := newDenialCache(4)
			defer c.Close()
			lim := ratelimit.Limit{Rate: tc.rate, Per: time.Second}
			batch := func(cost int64) []ratelimit.Item {
				return []ratelimit.Item{{Key: tc.keys[0], Algorithm: ratelimit.FixedWindow, Limit: lim, Cost: cost}, {Key: tc.keys[1], Algorithm: ratelimit.FixedWindow, Limit: lim, Cost: cost}}
			}
			if d := decide(t, c, batch(2)...); !d.Allowed {
				t.Fatalf("first request: %+v", d)
			}
			d := decide(t, c, batch(3)...)
			if d.Allowed || d.RetryAfter != time.Second {
				t.Fatalf("over the limit: %+v, want denied for 1s", d)
			}
			clock.Set(dcT0.Add(d.RetryAfter)) // the next window: room for the batch once
			calls := inner.Calls()
			if d := decide(t, c, batch(3)...); !d.Allowed || inner.Calls() != calls+1 {
				t.Fatalf("the probe: %+v after %d store calls, want admitted by the store", d, inner.Calls()-calls)
			}
			if c.Len() != 0 {
				t.Errorf("Len %d after the probe was admitted, want 0 (forgotten under every key)", c.Len())
			}
			if d := decide(t, c, batch(3)...); d.Allowed || inner.Calls() != calls+2 || d.RetryAfter != time.Second {
				t.Errorf("after the probe: %+v after %d store calls, want the store's denial for 1s", d, inner.Calls()-calls)
			}
		})
	}
}

// TestDenialCacheShadowOnEnforcedKey: a batch whose shadow item shares
// its key with an enforced one is not remembered. Denied while the shadow
// item fit (and took its cost first), the same batch with a larger shadow
// cost no longer fits the shadow item, which then takes nothing and leaves
// the enforced item room: the store admits it. TestDenialCacheMatchesStore
// found this (the cache refused what the store admitted).
func TestDenialCacheShadowOnEnforcedKey(t *testing.T) {
	c, inner, _ := newDenialCache(0)
	defer c.Close()
	item := func(cost int64, shadow bool) ratelimit.Item {
		return ratelimit.Item{Key: "x", Algorithm: ratelimit.FixedWindow, Limit: ratelimit.Limit{Rate: 4, Per: time.Second}, Cost: cost, Shadow: shadow}
	}
	if d := decide(t, c, item(2, false)); !d.Allowed {
		t.Fatalf("first request: %+v", d)
	}
	if d := decide(t, c, item(1, true), item(2, false)); d.Allowed {
		t.Fatalf("shadow 1 then 2 over 2 taken: %+v, want denied", d)
	}
	calls := inner.Calls()
	if d := decide(t, c, item(3, true), item(2, false)); !d.Allowed || inner.Calls() != calls+1 {
		t.Errorf("shadow 3 (refused) then 2: %+v after %d store calls, want admitted by the store", d, inner.Calls()-calls)
	}
}

// gatedStore holds each Decide that reaches it until the test lets it go:
// entered receives the call, and the call returns the store's decision,
// or fail's error when fail is set, once release is sent.
type gatedStore struct {
	ratelimit.Store
	entered chan struct{}
	release chan struct{}
	fail    error
}

func (g *gatedStore) Decide(ctx context.Context, items []ratelimit.Item) (ratelimit.Decision, error) {
	select {
	case g.entered <- struct{}{}:
	case <-ctx.Done():
		return ratelimit.Decision{}, ctx.Err()
	}
	select {
	case <-g.release:
	case <-ctx.Done(): // a call the test did not expect
		return ratelimit.Decision{}, ctx.Err()
	}
	if g.fail != nil {
		return ratelimit.Decision{}, g.fail
	}
	return g.Store.Decide(ctx, items)
}

// TestDenialCacheProbesOnceAtExpiry: when a remembered denial runs out,
// one request asks the store while the others of the batch keep the
// denial until its answer (or ProbeWait); an admission or an error of the
// probe forgets the denial, a new denial replaces it.
func TestDenialCacheProbesOnceAtExpiry(t *testing.T) {
	clock := &storetest.Clock{}
	clock.Set(dcT0)
	gate := &gatedStore{Store: memstore.New(memstore.Options{Now: clock.Now}),
		entered: make(chan struct{}, 1), release: make(chan struct{}, 1)}
	counted := &storetest.CountingStore{Store: gate}
	c := stack.NewDenialCache(counted, stack.DenialCacheOptions{Now: clock.Now, ProbeWait: 20 * time.Millisecond})
	defer c.Close()
	item := ratelimit.Item{Key: "k", Algorithm: ratelimit.TokenBucket, Limit: ratelimit.Limit{Rate: 1, Per: time.Second, Burst: 1}, Cost: 1}
	passed := func() ratelimit.Decision { // a decision the store makes
		t.Helper()
		gate.release <- struct{}{}
		d := decide(t, c, item)
		<-gate.entered
		return d
	}
	held := func(wantWait time.Duration) { // a decision the cache makes
		t.Helper()
		before := counted.Calls()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		d, err := c.Decide(ctx, []ratelimit.Item{item})
		if err != nil {
			t.Fatalf("held back: the store was asked (%v), want a local denial", err)
		}
		if d.Allowed || d.RetryAfter != wantWait || counted.Calls() != before {
			t.Fatalf("held back: %+v after %d store calls, want a local denial with RetryAfter %v and no store call", d, counted.Calls()-before, wantWait)
		}
	}
	if d := passed(); !d.Allowed {
		t.Fatalf("first request: %+v", d)
	}
	if d := passed(); d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("second request: %+v, want denied for 1s", d)
	}
	held(time.Second) // remembered

	// The denial runs out: one probe goes to the store, and is held there.
	clock.Set(dcT0.Add(time.Second))
	probe := make(chan ratelimit.Decision)
	go func() {
		d, _ := c.Decide(context.Background(), []ratelimit.Item{item})
		probe <- d
	}()
	<-gate.entered
	held(20 * time.Millisecond)
	clock.Set(dcT0.Add(time.Second + 15*time.Millisecond))
	held(5 * time.Millisecond)
	gate.release <- struct{}{}
	if d := <-probe; !d.Allowed {
		t.Fatalf("probe: %+v, want admitted (one unit back after 1s)", d)
	}
	// Admitted: forgotten, so the next request asks the store, which
	// denies anew and is remembered again.
	if d := passed(); d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("after the probe: %+v, want the store's new denial for 1s", d)
	}
	held(time.Second)

	// A probe that outlasts ProbeWait no longer holds the others back, and
	// one that fails forgets the denial.
	clock.Set(dcT0.Add(2*time.Second + 15*time.Millisecond))
	gate.fail = errors.New("store down")
	go func() {
		d, _ := c.Decide(context.Background(), []ratelimit.Item{item})
		probe <- d
	}()
	<-gate.entered
	clock.Set(dcT0.Add(2*time.Second + 35*time.Millisecond))
	late := make(chan struct{})
	go func() {
		defer close(late)
		_, _ = c.Decide(context.Background(), []ratelimit.Item{item}) // a second probe: to the store
	}()
	<-gate.entered
	gate.release <- struct{}{}
	gate.release <- struct{}{}
	<-probe
	<-late
	gate.fail = nil
	before := counted.Calls()
	if d := passed(); !d.Allowed || counted.Calls() != before+1 {
		t.Errorf("after failed probes: %+v, want the store asked and admitting", d)
	}
}

// BenchmarkDenialCacheHit measures a denial answered locally: the cost of
// a hot key's request once the store has denied it.
func BenchmarkDenialCacheHit(b *testing.B) {
	clock := &storetest.Clock{}
	clock.Set(dcT0)
	c := stack.NewDenialCache(memstore.New(memstore.Options{Now: clock.Now}), stack.DenialCacheOptions{Now: clock.Now})
	defer c.Close()
	items := []ratelimit.Item{{Key: "{acme}:hot", Algorithm: ratelimit.FixedWindow, Limit: ratelimit.Limit{Rate: 1, Per: time.Hour}, Cost: 1}}
	for range 2 {
		if _, err := c.Decide(context.Background(), items); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if d, _ := c.Decide(context.Background(), items); d.Allowed {
			b.Fatal("admitted over the limit")
		}
	}
	b.StopTimer()
	if c.LocalDenials() < uint64(b.N) {
		b.Fatalf("%d local denials for %d requests", c.LocalDenials(), b.N)
	}
}

// BenchmarkDenialCacheHitParallel measures denials answered locally from
// many goroutines at once: over 1,024 denied keys (callers over their
// limits), and over one hot key that every goroutine asks for.
func BenchmarkDenialCacheHitParallel(b *testing.B) {
	for _, keys := range []int{1024, 1} {
		b.Run(fmt.Sprint("keys=", keys), func(b *testing.B) {
			// A fixed instant without a lock: a test clock's mutex would be
			// the contention measured.
			now := func() time.Time { return dcT0 }
			c := stack.NewDenialCache(memstore.New(memstore.Options{Now: now}), stack.DenialCacheOptions{Now: now})
			defer c.Close()
			batches := make([][]ratelimit.Item, keys)
			for i := range batches {
				batches[i] = []ratelimit.Item{{Key: fmt.Sprintf("{t%d}:hot", i), Algorithm: ratelimit.FixedWindow, Limit: ratelimit.Limit{Rate: 1, Per: time.Hour}, Cost: 1}}
				for range 2 {
					if _, err := c.Decide(context.Background(), batches[i]); err != nil {
						b.Fatal(err)
					}
				}
			}
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(7919))
				for pb.Next() {
					i++
					if d, _ := c.Decide(context.Background(), batches[i%keys]); d.Allowed {
						b.Error("admitted over the limit")
						return
					}
				}
			})
		})
	}
}
