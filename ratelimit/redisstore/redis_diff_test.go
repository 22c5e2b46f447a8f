package redisstore_test

import (
	"context"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/memstore"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// diffEpoch is a whole hour since the Unix epoch, so that every window of
// the differential tests starts on it.
var diffEpoch = time.Unix(1_699_999_200, 0)

// diffSpecs are the limits of the differential tests. Their keys live at
// least 5 s of real time after a write (a token bucket misses at least
// Per/Rate >= 5 s of refill; clock instants keep >= 5 s before any window
// end), so Redis never expires a key before the injected clock would.
var diffSpecs = []struct {
	alg ratelimit.Algorithm
	lim ratelimit.Limit
}{
	{ratelimit.TokenBucket, ratelimit.Limit{Rate: 1, Per: 10 * time.Second, Burst: 3}},
	{ratelimit.TokenBucket, ratelimit.Limit{Rate: 7, Per: time.Minute, Burst: 5}},
	{ratelimit.TokenBucket, ratelimit.Limit{Rate: 100, Per: time.Hour, Burst: 20}},
	{ratelimit.FixedWindow, ratelimit.Limit{Rate: 3, Per: 10 * time.Second}},
	{ratelimit.FixedWindow, ratelimit.Limit{Rate: 5, Per: time.Minute}},
	// Sliding windows with 10 s buckets, so that bucket ends keep the
	// same distance from clock instants as window ends do.
	{ratelimit.SlidingWindow, ratelimit.Limit{Rate: 4, Per: 10 * time.Second, Buckets: 1}},
	{ratelimit.SlidingWindow, ratelimit.Limit{Rate: 6, Per: time.Minute, Buckets: 6}},
	{ratelimit.SlidingWindow, ratelimit.Limit{Rate: 9, Per: 100 * time.Second}},
	{ratelimit.SlidingLog, ratelimit.Limit{Rate: 3, Per: 10 * time.Second}},
	{ratelimit.SlidingLog, ratelimit.Limit{Rate: 5, Per: time.Hour}},
}

var diffSeq atomic.Int64

// runDifferential decides random batches on a RedisStore and a memstore.Store
// with the same clock and requires identical Decisions. keys are the key
// names (under a fresh prefix per run); with switchSpecs a key's limit or
// algorithm may change between batches, as a reload does.
func runDifferential(t *testing.T, addr string, keys []string, switchSpecs bool) {
	rapid.Check(t, func(rt *rapid.T) {
		// Keys are only sure to live 5 s of real time (see diffSpecs): a
		// check that took longer on a loaded machine may see Redis expire
		// a key the injected clock still holds, which is a missed
		// deadline, not a wrong answer. A token bucket close to full is
		// an exception: its time to live is its time to full, as short as
		// 1 ms, which any machine may outrun (see keyLives). A check that
		// differs after Redis dropped such a key early proves nothing
		// either way and is discarded; rapid draws another in its place.
		began := time.Now()
		outran := "" // a key Redis expired before the injected clock did
		var lives *keyLives
		clock := storetest.NewClock(diffEpoch) // shared by both stores
		mismatch := func(format string, args ...any) {
			if took := time.Since(began); took > 4*time.Second {
				rt.Fatalf("missed deadline: this check took %v of real time, longer than keys are sure to live; then "+format, append([]any{took}, args...)...)
			}
			if outran == "" { // it may have ended during this step
				outran = lives.outran(clock.Now())
			}
			if outran != "" {
				rt.Skipf("discarded: Redis expired %s in real time before the injected clock reached its end; then "+format, append([]any{outran}, args...)...)
			}
			rt.Fatalf(format, args...)
		}
		mem := memstore.New(memstore.Options{Now: clock.Now})
		defer mem.Close()
		client := redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{addr}})
		red := redisstore.NewRedisStore(client, redisstore.RedisOptions{Now: clock.Now})
		defer red.Close()
		lives = newKeyLives(client)
		prefix := fmt.Sprintf("diff%d:", diffSeq.Add(1))

		spec := make([]int, len(keys))
		for i := range spec {
			spec[i] = rapid.IntRange(0, len(diffSpecs)-1).Draw(rt, "spec")
		}
		// now = epoch + grid×10s + off with off < 5s, never going back.
		grid, off, small := int64(0), int64(0), int64(0)
		var decided []int64 // the decisions' times, for settlements to name
		steps := rapid.IntRange(1, 60).Draw(rt, "steps")
		for step := range steps {
			g := grid
			switch rapid.IntRange(0, 9).Draw(rt, "advance") {
			case 0, 1, 2:
			case 9:
				g += rapid.Int64Range(1, 800).Draw(rt, "jump")
			default:
				g += rapid.Int64Range(0, 8).Draw(rt, "grid")
			}
			lo := int64(0)
			if g == grid {
				lo = off
			}
			grid, off = g, rapid.Int64Range(lo, 4_999_999).Draw(rt, "off")
			if switchSpecs {
				// Keys change limits: stay well inside every key's time to
				// live (see TestRedisStoreMatchesMemoryStoreReload).
				small = min(small+rapid.Int64Range(0, 50_000).Draw(rt, "dt"), 4_999_999)
				grid, off = 0, small
			}
			clock.Set(time.UnixMicro(diffEpoch.UnixMicro() + grid*10_000_000 + off))
			if k := lives.outran(clock.Now()); k != "" && outran == "" {
				outran = k // the stores may differ from here on
			}
			if switchSpecs && rapid.IntRange(0, 7).Draw(rt, "switch") == 0 {
				k := rapid.IntRange(0, len(keys)-1).Draw(rt, "switched key")
				spec[k] = rapid.IntRange(0, len(diffSpecs)-1).Draw(rt, "new spec")
			}
			if rapid.IntRange(0, 3).Draw(rt, "settle") == 0 {
				// A settlement of signed deltas, up to twice a capacity
				// either way (into debt, and refunds past full).
				ss := make([]ratelimit.Settlement, rapid.IntRange(1, 3).Draw(rt, "settlements"))
				for i := range ss {
					k := rapid.IntRange(0, len(keys)-1).Draw(rt, "key")
					sp := diffSpecs[spec[k]]
					c := ratelimit.Capacity(sp.alg, sp.lim)
					ss[i] = ratelimit.Settlement{Item: ratelimit.Item{Key: prefix + keys[k], Algorithm: sp.alg, Limit: sp.lim},
						Delta: rapid.Int64Range(-2*c, 2*c).Draw(rt, "delta")}
					// The time of an earlier decision, or unknown (0).
					if j := rapid.IntRange(-1, len(decided)-1).Draw(rt, "reserved at"); j >= 0 {
						ss[i].ReservedAt = decided[j]
					}
				}
				id := fmt.Sprintf("%ss%d", prefix, step)
				am, errM := mem.Settle(context.Background(), id, ss)
				ar, errR := red.Settle(context.Background(), id, ss)
				if errM != nil || errR != nil || am != ar {
					mismatch("step %d: settle %+v: memory %v, %v; redis %v, %v", step, ss, am, errM, ar, errR)
				}
				written := make([]string, len(ss))
				for i := range ss {
					written[i] = ss[i].Item.Key
				}
				lives.note(written, clock.Now())
				rt.Logf("step %d at %v: settle %+v", step, clock.Now().Sub(diffEpoch), ss)
				continue
			}
			n := rapid.IntRange(1, 4).Draw(rt, "items")
			items := make([]ratelimit.Item, n)
			for i := range items {
				k := rapid.IntRange(0, len(keys)-1).Draw(rt, "key")
				sp := diffSpecs[spec[k]]
				items[i] = ratelimit.Item{
					Key:       prefix + keys[k],
					Algorithm: sp.alg,
					Limit:     sp.lim,
					Cost:      rapid.Int64Range(0, ratelimit.Capacity(sp.alg, sp.lim)).Draw(rt, "cost"),
					Shadow:    rapid.IntRange(0, 4).Draw(rt, "shadow") == 0,
				}
			}
			dm, errM := mem.Decide(context.Background(), items)
			dr, errR := red.Decide(context.Background(), items)
			if errM != nil || errR != nil {
				rt.Fatalf("step %d: memory err %v, redis err %v", step, errM, errR)
			}
			rt.Logf("step %d at %v: %+v\n  -> %+v", step, clock.Now().Sub(diffEpoch), items, dm)
			decided = append(decided, clock.Now().UnixMicro())
			if !reflect.DeepEqual(dm, dr) {
				mismatch("step %d at %v, items %+v:\nmemory %+v\nredis  %+v", step, clock.Now().Sub(diffEpoch), items, dm, dr)
			}
			written := make([]string, len(items))
			for i := range items {
				written[i] = items[i].Key
			}
			lives.note(written, clock.Now())
		}
	})
}

// TestRedisStoreMatchesMemoryStore compares batches spread over several
// hash tags (so RedisStore decides them in several groups, refunding and
// evaluating after a denial) with memstore.Store's single atomic group. Specs
// stay fixed per key: a refund rewrites a key, which would make a later Per
// change round differently than on a key never written.
func TestRedisStoreMatchesMemoryStore(t *testing.T) {
	srv := redistest.StartStandalone(t)
	runDifferential(t, srv.Addr, []string{"{a}x", "{a}y", "{b}x", "z", "{c}"}, false)
}

// TestRedisStoreMatchesMemoryStoreReload compares single-group batches
// while keys change algorithm, rate and Per between batches (Per changes
// between 10 s, 1 min and 1 h exercise the exact wide multiplication of the
// scripts). The clock advances by at most 50 ms a batch, so no key reaches
// its time to live: once it has, memstore.Store (on the injected clock) drops
// the key while Redis (on real time) keeps it, and under a new limit the
// kept state legitimately differs from an absent one.
func TestRedisStoreMatchesMemoryStoreReload(t *testing.T) {
	srv := redistest.StartStandalone(t)
	runDifferential(t, srv.Addr, []string{"{t}x", "{t}y", "{t}z"}, true)
}
