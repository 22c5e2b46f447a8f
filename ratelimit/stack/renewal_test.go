package stack_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/memstore"
	"github.com/quotagate/quotagate/ratelimit/slotkeeper"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// replySlots is a SlotStore whose renewals answer reply, whatever the
// items: the store, or a proxy in front of it, as it may misbehave.
type replySlots struct {
	mu    sync.Mutex
	reply ratelimit.Renewal
}

func (s *replySlots) set(r ratelimit.Renewal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reply = r
}

func (s *replySlots) RenewReport(context.Context, []ratelimit.Item) (ratelimit.Renewal, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reply, nil
}

func (s *replySlots) Renew(ctx context.Context, items []ratelimit.Item) ([]int, error) {
	r, err := s.RenewReport(ctx, items)
	return r.Lost, err
}

func (s *replySlots) Release(context.Context, []ratelimit.Item) error { return nil }

func (s *replySlots) Decide(context.Context, []ratelimit.Item) (ratelimit.Decision, error) {
	return ratelimit.Decision{}, errors.New("replySlots decides nothing")
}

func (s *replySlots) Close() error { return nil }

// badRenewals are replies to a renewal of 3 items that are not Renewals
// of them.
var badRenewals = []ratelimit.Renewal{
	{Lost: []int{2, 0}},
	{Lost: []int{1, 1}},
	{Lost: []int{3}},
	{Lost: []int{-1}},
	{Lost: []int{0, 1, 2, 3}},
	{Retaken: []int{2, 1}},
	{Retaken: []int{0, 0}},
	{Retaken: []int{1 << 40}},
	{Lost: []int{0, 1}, Retaken: []int{1}},
}

// hourSlot is a Concurrency item whose slot is renewed every 20 minutes,
// so that a keeper's own rounds never run during a test.
func hourSlot(holder string) ratelimit.Item {
	return ratelimit.Item{Key: "{r}k", Algorithm: ratelimit.Concurrency, Limit: ratelimit.Limit{Max: 10, Per: time.Hour},
		Cost: 1, Holder: holder}
}

// TestSlotKeeperRefusesBadRenewals: a renewal reply with an index out of
// range, twice or out of order is the store's failure (returned, and
// given to OnError as "renew"), and reports no slot lost or taken back;
// the slots stay held, and the next good reply is read as before.
func TestSlotKeeperRefusesBadRenewals(t *testing.T) {
	for _, bad := range badRenewals {
		t.Run(fmt.Sprintf("lost=%v,retaken=%v", bad.Lost, bad.Retaken), func(t *testing.T) {
			store := &replySlots{reply: bad}
			var failures []string
			var lost, retaken []int
			k := slotkeeper.New(slotkeeper.Options{
				OnError: func(op string, err error) { failures = append(failures, op+": "+err.Error()) },
				Lost: func(ls []slotkeeper.LostSlot) {
					for _, l := range ls {
						lost = append(lost, l.Index)
					}
				},
				Retaken: func(ls []slotkeeper.LostSlot) {
					for _, l := range ls {
						retaken = append(retaken, l.Index)
					}
				},
			})
			defer k.Close()
			h := k.Hold(store, []ratelimit.Item{hourSlot("a"), hourSlot("b"), hourSlot("c")}, false, "owner")
			defer h.Release()

			err := k.RenewAll(context.Background())
			if !errors.Is(err, ratelimit.ErrUnavailable) {
				t.Errorf("RenewAll: %v, want ErrUnavailable", err)
			}
			if len(failures) != 1 || failures[0] != "renew: "+fmt.Sprint(err) {
				t.Errorf("OnError got %q, want one renew failure", failures)
			}
			if lost != nil || retaken != nil {
				t.Errorf("reported lost %v, taken back %v; want nothing", lost, retaken)
			}

			store.set(ratelimit.Renewal{Lost: []int{1}, Retaken: []int{2}})
			if err := k.RenewAll(context.Background()); err != nil {
				t.Fatalf("RenewAll after a good reply: %v", err)
			}
			if !slices.Equal(lost, []int{1}) || !slices.Equal(retaken, []int{2}) {
				t.Errorf("after a good reply: lost %v, taken back %v; want [1], [2]", lost, retaken)
			}
		})
	}
}

// TestStackRefusesBadRenewals: a Stack reads its backend's renewal reply
// as the keeper does: one that is not a Renewal of the items is the
// backend's failure, and reports nothing.
func TestStackRefusesBadRenewals(t *testing.T) {
	items := []ratelimit.Item{hourSlot("a"), hourSlot("b"), hourSlot("c")}
	for _, bad := range badRenewals {
		t.Run(fmt.Sprintf("lost=%v,retaken=%v", bad.Lost, bad.Retaken), func(t *testing.T) {
			backend := &replySlots{reply: bad}
			s := stack.New(backend, stack.Options{})
			defer s.Close()
			r, err := s.RenewReport(context.Background(), items)
			if !errors.Is(err, ratelimit.ErrUnavailable) || r.Lost != nil || r.Retaken != nil {
				t.Errorf("RenewReport: %+v, %v; want nothing reported and ErrUnavailable", r, err)
			}
		})
	}
}

// TestStackRenewsLocallyOnlyAfterLocalSlots: while the backend has taken
// every slot, a Stack's renewal does no work in its local shares (it never
// reads their clock). Once a slot was taken there (the backend failed),
// it renews there too: a slot that only the local shares hold, and that
// the backend, full, cannot take back, is not lost.
func TestStackRenewsLocallyOnlyAfterLocalSlots(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	backend := memstore.New(memstore.Options{Now: func() time.Time { return t0 }})
	defer backend.Close()
	var reads atomic.Int64
	inner := &flakyStore{}
	s := stack.New(inner, stack.Options{Slots: backend, DenialCacheSize: -1,
		Now: func() time.Time { reads.Add(1); return t0 }})
	defer s.Close()
	ctx := context.Background()
	slot := func(holder string) ratelimit.Item {
		it := hourSlot(holder)
		it.Limit.Max, it.OnError = 3, ratelimit.OnErrorLocal
		return it
	}
	remote := []ratelimit.Item{slot("a"), slot("b"), slot("c")}
	if d, err := backend.Decide(ctx, remote); err != nil || !d.Allowed {
		t.Fatalf("backend: %+v, %v", d, err)
	}
	reads.Store(0)
	if r, err := s.RenewReport(ctx, remote); err != nil || r.Lost != nil || r.Retaken != nil {
		t.Fatalf("RenewReport: %+v, %v; want nothing lost or taken back", r, err)
	}
	if n := reads.Load(); n != 0 {
		t.Errorf("a renewal with no slot ever taken locally read the local clock %d times, want 0", n)
	}

	inner.set(errDown)
	if d, err := s.Decide(ctx, []ratelimit.Item{slot("d")}); err != nil || !d.Allowed || d.Failure == nil {
		t.Fatalf("d: %+v, %v; want admitted on the local share", d, err)
	}
	inner.set(nil)
	reads.Store(0)
	if r, err := s.RenewReport(ctx, append(remote, slot("d"))); err != nil || r.Lost != nil {
		t.Errorf("RenewReport after a local slot: %+v, %v; want none lost", r, err)
	}
	if n := reads.Load(); n < 4 {
		t.Errorf("a renewal after a local slot read the local clock %d times, want one per item", n)
	}
}

// BenchmarkStackRenewReport renews 1000 slots held in a memory backend
// through a Stack whose local shares never held one: one keeper round.
func BenchmarkStackRenewReport(b *testing.B) {
	backend := memstore.New(memstore.Options{})
	defer backend.Close()
	s := stack.New(backend, stack.Options{})
	defer s.Close()
	benchRenewRounds(b, s, backend)
}

// benchRenewRounds takes 1000 slots of 100 keys in backend and renews
// them through s, one round per iteration.
func benchRenewRounds(b *testing.B, s *stack.Stack, backend ratelimit.Store) {
	items := make([]ratelimit.Item, 1000)
	for i := range items {
		items[i] = hourSlot(fmt.Sprint(i))
		items[i].Key, items[i].Limit.Max = fmt.Sprintf("{r}%d", i%100), 10
	}
	ctx := context.Background()
	if d, err := backend.Decide(ctx, items); err != nil || !d.Allowed {
		b.Fatalf("%+v, %v", d, err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if r, err := s.RenewReport(ctx, items); err != nil || r.Lost != nil {
			b.Fatalf("%+v, %v", r, err)
		}
	}
}

// BenchmarkStackRenewReportAfterOutage is BenchmarkStackRenewReport on a
// Stack whose local shares held a slot during an outage that ended long
// ago: every slot they held has expired.
func BenchmarkStackRenewReportAfterOutage(b *testing.B) {
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	backend := memstore.New(memstore.Options{Now: clock.Now})
	defer backend.Close()
	inner := &flakyStore{}
	s := stack.New(inner, stack.Options{Slots: backend, DenialCacheSize: -1, Now: clock.Now})
	defer s.Close()
	ctx := context.Background()
	inner.set(errDown)
	out := hourSlot("outage")
	out.OnError = ratelimit.OnErrorLocal
	if d, err := s.Decide(ctx, []ratelimit.Item{out}); err != nil || !d.Allowed || d.Failure == nil {
		b.Fatalf("%+v, %v", d, err)
	}
	inner.set(nil)
	if err := s.Release(ctx, []ratelimit.Item{out}); err != nil {
		b.Fatal(err)
	}
	clock.Add(2 * time.Hour)
	benchRenewRounds(b, s, backend)
}

// TestStackReleasesLocallyOnlyAfterLocalSlots: a Stack's release does no
// work in its local shares (it never reads their clock) until a slot was
// taken there; from then on it frees the slots they hold.
func TestStackReleasesLocallyOnlyAfterLocalSlots(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	backend := memstore.New(memstore.Options{Now: func() time.Time { return t0 }})
	defer backend.Close()
	var reads atomic.Int64
	inner := &flakyStore{}
	s := stack.New(inner, stack.Options{Slots: backend, DenialCacheSize: -1,
		Now: func() time.Time { reads.Add(1); return t0 }})
	defer s.Close()
	ctx := context.Background()
	slot := func(holder string) ratelimit.Item {
		it := hourSlot(holder)
		it.Limit.Max, it.OnError = 1, ratelimit.OnErrorLocal
		return it
	}
	if d, err := backend.Decide(ctx, []ratelimit.Item{slot("a")}); err != nil || !d.Allowed {
		t.Fatalf("backend: %+v, %v", d, err)
	}
	reads.Store(0)
	if err := s.Release(ctx, []ratelimit.Item{slot("a")}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if n := reads.Load(); n != 0 {
		t.Errorf("a release with no slot ever taken locally read the local clock %d times, want 0", n)
	}

	inner.set(errDown)
	if d, err := s.Decide(ctx, []ratelimit.Item{slot("b")}); err != nil || !d.Allowed || d.Failure == nil {
		t.Fatalf("b: %+v, %v; want admitted on the local share", d, err)
	}
	if err := s.Release(ctx, []ratelimit.Item{slot("b")}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if d, err := s.Decide(ctx, []ratelimit.Item{slot("c")}); err != nil || !d.Allowed {
		t.Errorf("c after b's release: %+v, %v; want admitted on the local share, freed", d, err)
	}
}

// TestStackBreakerOpenWithoutLocalSlots: a slot the backend granted, then
// the backend's breaker opens. A renewal while it is open renews the slot
// nowhere: not in the backend (skipped), and not in the local shares,
// which never held a slot and are not even looked at (their clock is never
// read); it reports the slot neither lost nor taken back, and once the
// breaker closes, the backend renews it as before. Items that no store is
// asked about are still refused when invalid.
func TestStackBreakerOpenWithoutLocalSlots(t *testing.T) {
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	backend := memstore.New(memstore.Options{Now: clock.Now})
	defer backend.Close()
	inner := &flakyStore{}
	b := stack.NewBreaker(inner, stack.BreakerOptions{Failures: 1, Cooldown: time.Hour, Now: clock.Now})
	var reads atomic.Int64
	s := stack.New(b, stack.Options{Breaker: b, Slots: backend, DenialCacheSize: -1,
		Now: func() time.Time { reads.Add(1); return clock.Now() }})
	defer s.Close()
	ctx := context.Background()
	slot := storetest.SlotItem("{t}s", "a", 1, ratelimit.OnErrorLocal)
	if d, err := backend.Decide(ctx, []ratelimit.Item{slot}); err != nil || !d.Allowed {
		t.Fatalf("backend: %+v, %v", d, err)
	}

	inner.set(errDown)
	rate := ratelimit.Item{Key: "{t}r", Algorithm: ratelimit.FixedWindow, Limit: ratelimit.Limit{Rate: 1, Per: time.Hour}, Cost: 1,
		OnError: ratelimit.OnErrorOpen}
	if d, err := s.Decide(ctx, []ratelimit.Item{rate}); err != nil || d.Failure == nil || !s.Health().AllDown {
		t.Fatalf("tripping the breaker: %+v, %v, health %+v; want a failure and the breaker open", d, err, s.Health())
	}
	reads.Store(0)
	clock.Add(20 * time.Second)
	if r, err := s.RenewReport(ctx, []ratelimit.Item{slot}); err != nil || r.Lost != nil || r.Retaken != nil {
		t.Errorf("RenewReport with the breaker open: %+v, %v; want nothing reported", r, err)
	}
	if n := reads.Load(); n != 0 {
		t.Errorf("a renewal with the breaker open and no local slot read the local clock %d times, want 0", n)
	}
	invalid := slot
	invalid.Holder = ""
	if _, err := s.RenewReport(ctx, []ratelimit.Item{invalid}); !errors.Is(err, ratelimit.ErrInvalid) {
		t.Errorf("RenewReport of an item without a holder: %v, want ErrInvalid", err)
	}
	if err := s.Release(ctx, []ratelimit.Item{invalid}); !errors.Is(err, ratelimit.ErrInvalid) {
		t.Errorf("Release of an item without a holder: %v, want ErrInvalid", err)
	}

	// The slot was renewed nowhere: the backend's copy still expires 30 s
	// after it was taken, and the renewal that reaches it renews it there.
	inner.set(nil)
	clock.Add(time.Hour + time.Second)
	if d, err := s.Decide(ctx, []ratelimit.Item{rate}); err != nil || d.Failure != nil || s.Health().AllDown {
		t.Fatalf("probe after the cooldown: %+v, %v; want the breaker closed", d, err)
	}
	if r, err := s.RenewReport(ctx, []ratelimit.Item{slot}); err != nil || r.Lost != nil || !slices.Equal(r.Retaken, []int{0}) {
		t.Errorf("RenewReport once the backend is back: %+v, %v; want the expired slot taken back there", r, err)
	}
}

// TestStackForgetsExpiredLocalSlots: the local shares are consulted while
// a slot taken there may be held, for as long as renewals there extend it,
// and no longer once every such slot has expired: from then on a release
// or renewal reads their clock once more, then never until a slot is
// taken there again. Renewals of slots the backend holds, which the local
// shares do not, keep nothing alive there.
func TestStackForgetsExpiredLocalSlots(t *testing.T) {
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	backend := memstore.New(memstore.Options{Now: clock.Now})
	defer backend.Close()
	inner := &flakyStore{}
	var reads atomic.Int64
	s := stack.New(inner, stack.Options{Slots: backend, DenialCacheSize: -1,
		Now: func() time.Time { reads.Add(1); return clock.Now() }})
	defer s.Close()
	ctx := context.Background()
	// All slots are held 30 s without a renewal. remote is the backend's;
	// local is taken on the local share while the backend fails, and x
	// fills local's key in the backend, which thus cannot take it back.
	remote := storetest.SlotItem("{t}s", "remote", 1, ratelimit.OnErrorLocal)
	local, x := storetest.SlotItem("{t}l", "local", 1, ratelimit.OnErrorLocal), storetest.SlotItem("{t}l", "x", 1, ratelimit.OnErrorLocal)
	if d, err := backend.Decide(ctx, []ratelimit.Item{remote, x}); err != nil || !d.Allowed {
		t.Fatalf("backend: %+v, %v", d, err)
	}
	inner.set(errDown)
	if d, err := s.Decide(ctx, []ratelimit.Item{local}); err != nil || !d.Allowed || d.Failure == nil {
		t.Fatalf("local: %+v, %v; want admitted on the local share", d, err)
	}
	inner.set(nil)
	renew := func(at string, items ...ratelimit.Item) {
		t.Helper()
		if lost, err := backend.Renew(ctx, []ratelimit.Item{x}); err != nil || lost != nil {
			t.Fatalf("%s: renewing x in the backend: %v, %v", at, lost, err)
		}
		if r, err := s.RenewReport(ctx, items); err != nil || r.Lost != nil || r.Retaken != nil {
			t.Errorf("%s: RenewReport: %+v, %v; want nothing lost or taken back", at, r, err)
		}
	}
	// At 20 s and 40 s local is renewed on the local share: at 40 s it is
	// held there only thanks to the renewal at 20 s.
	clock.Add(20 * time.Second)
	renew("20s", remote, local)
	clock.Add(20 * time.Second)
	renew("40s", remote, local)
	if err := s.Release(ctx, []ratelimit.Item{local}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// local is gone, its last expiry 70 s; remote's renewals at 60 s do
	// not extend the time the local shares are consulted.
	clock.Add(20 * time.Second)
	renew("60s", remote)
	clock.Add(10 * time.Second)
	reads.Store(0)
	renew("70s", remote)
	if n := reads.Load(); n != 1 {
		t.Errorf("the first renewal once every local slot expired read the local clock %d times, want 1 (the check)", n)
	}
	reads.Store(0)
	renew("70s, again", remote)
	if err := s.Release(ctx, []ratelimit.Item{remote}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if n := reads.Load(); n != 0 {
		t.Errorf("a renewal and a release after every local slot expired read the local clock %d times, want 0", n)
	}

	// A slot taken there again makes them consulted again.
	inner.set(errDown)
	if d, err := s.Decide(ctx, []ratelimit.Item{remote}); err != nil || !d.Allowed || d.Failure == nil {
		t.Fatalf("remote on the local share: %+v, %v", d, err)
	}
	inner.set(nil)
	reads.Store(0)
	if lost, err := s.Renew(ctx, []ratelimit.Item{remote}); err != nil || lost != nil {
		t.Errorf("Renew of a slot the local share holds: %v, %v; want none lost", lost, err)
	}
	if n := reads.Load(); n < 2 {
		t.Errorf("a renewal after a new local slot read the local clock %d times, want the check and the renewal", n)
	}
}

// TestStackLocalSlotsBeforeEpoch: a local slot taken on a clock before
// 1970, whose expiry is a negative number of µs, is still released there.
func TestStackLocalSlotsBeforeEpoch(t *testing.T) {
	clock := storetest.NewClock(time.Unix(-3600, 0))
	inner := &flakyStore{}
	inner.set(errDown)
	s := stack.New(inner, stack.Options{Now: clock.Now, DenialCacheSize: -1})
	defer s.Close()
	ctx := context.Background()
	a, b := storetest.SlotItem("{t}s", "a", 1, ratelimit.OnErrorLocal), storetest.SlotItem("{t}s", "b", 1, ratelimit.OnErrorLocal)
	if d, err := s.Decide(ctx, []ratelimit.Item{a}); err != nil || !d.Allowed {
		t.Fatalf("a: %+v, %v", d, err)
	}
	if err := s.Release(ctx, []ratelimit.Item{a}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if d, err := s.Decide(ctx, []ratelimit.Item{b}); err != nil || !d.Allowed {
		t.Errorf("b after a's release: %+v, %v; want the freed slot", d, err)
	}
}

// TestStackLocalSlotsReleasedUnderRace: while the backend is down, holders
// take and release slots on the local shares as their clock runs on, so
// that the local slots keep expiring and the Stack keeps forgetting and
// learning again that the local shares hold slots. No release of a live
// slot is ever skipped: each holder, alone on a key of one slot, always
// finds it free again. Each holder moves the clock on by 1 ms between
// taking and releasing its slot (a slot lives 20 ms), and by 25 ms before
// one slot in ten, which expires every slot then held: the Stack then
// forgets the local slots while others take new ones.
func TestStackLocalSlotsReleasedUnderRace(t *testing.T) {
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	inner := &flakyStore{}
	inner.set(errDown)
	s := stack.New(inner, stack.Options{Now: clock.Now, DenialCacheSize: -1})
	defer s.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	var denied atomic.Int64
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				if i%10 == 0 {
					clock.Add(25 * time.Millisecond) // every slot held now expires
				}
				it := storetest.SlotItem(fmt.Sprintf("{t}%d", g), fmt.Sprint(i), 1, ratelimit.OnErrorLocal)
				it.Limit.Per = 20 * time.Millisecond
				if d, err := s.Decide(ctx, []ratelimit.Item{it}); err != nil || !d.Allowed {
					denied.Add(1)
					continue
				}
				clock.Add(time.Millisecond) // others' slots may expire meanwhile
				if err := s.Release(ctx, []ratelimit.Item{it}); err != nil {
					t.Errorf("Release: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	if n := denied.Load(); n != 0 {
		t.Errorf("%d of 4000 slots were denied on a key whose one slot was released before", n)
	}
}

// TestStackRenewLostInBothStores: a Stack reports a slot lost only when
// the backend could not take it back and the local shares do not hold it,
// so a slot taken on the local share while the backend was down is not
// lost. The backend takes back the first slot it finds missing (local's,
// while it has room), and only that: the second (gone's) finds it full.
func TestStackRenewLostInBothStores(t *testing.T) {
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	backend := memstore.New(memstore.Options{Now: clock.Now})
	inner := &flakyStore{}
	inner.set(errDown)
	s := stack.New(inner, stack.Options{Now: clock.Now, Slots: backend})
	defer s.Close()
	defer backend.Close()
	ctx := context.Background()
	remote, local := storetest.SlotItem("{t}s", "remote", 2, ratelimit.OnErrorLocal), storetest.SlotItem("{t}s", "local", 2, ratelimit.OnErrorLocal)
	if d, err := backend.Decide(ctx, []ratelimit.Item{remote}); err != nil || !d.Allowed {
		t.Fatalf("remote: %+v, %v", d, err)
	}
	if d, err := s.Decide(ctx, []ratelimit.Item{local}); err != nil || !d.Allowed || d.Failure == nil {
		t.Fatalf("local: %+v, %v; want admitted on the local share", d, err)
	}
	lost, err := s.Renew(ctx, []ratelimit.Item{remote, local, storetest.SlotItem("{t}s", "gone", 2, ratelimit.OnErrorLocal)})
	if err != nil || !slices.Equal(lost, []int{2}) {
		t.Errorf("lost %v, err %v; want [2]", lost, err)
	}
	peek := remote
	peek.Cost, peek.Holder = 0, ""
	if d, err := backend.Decide(ctx, []ratelimit.Item{peek}); err != nil || d.Results[0].Remaining != 0 {
		t.Errorf("backend after the renewal: %+v, %v; want full (remote and local)", d, err)
	}
}
