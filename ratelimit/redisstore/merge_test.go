package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
)

// mergeStore returns an uncoalesced store on addrs (a Cluster when there
// are several) that sends its calls as EVALSHA, merged by up to maxMerge.
func mergeStore(t *testing.T, addrs []string, maxMerge int) *RedisStore {
	t.Helper()
	s := NewRedisStore(NewRedisClient(RedisClientOptions{Addrs: addrs}), RedisOptions{
		Coalesce: CoalesceOptions{Disabled: true, MaxMerge: maxMerge}, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { _ = s.Close() })
	s.run.pinEvalsha()
	if err := decideScript.Load(context.Background(), s.client).Err(); err != nil {
		t.Fatal(err)
	}
	return s
}

// mergeDecision is one decision of a merge test: its items (one hash
// tag), its mode, and whether it may merge (a refund may not).
type mergeDecision struct {
	items []ratelimit.Item
	mode  string
	merge bool
}

// sendDecisions sends ds as one pipeline of s under the injected time nowUS
// (nowUS 0: the server clock) and returns each decision's reply and
// error.
func (s *RedisStore) sendDecisions(ds []mergeDecision, nowUS int64) ([]any, []error) {
	calls := make([]*scriptCall, len(ds))
	for k, d := range ds {
		idx := make([]int, len(d.items))
		for i := range idx {
			idx[i] = i
		}
		calls[k] = s.getCall(newBound(context.Background(), time.Minute))
		calls[k].build(d.mode, nowUS, nowUS != 0, d.items, idx, nil)
		calls[k].merge = d.merge
	}
	return s.exchange(calls)
}

// evalshaCalls returns the EVALSHA and EVAL commands srv has run.
func evalshaCalls(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	info, _ := srv.MustDo(t, "INFO", "commandstats").(string)
	var n int64
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				v, _, _ := strings.Cut(rest, ",")
				c, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("commandstats line %q: %v", line, err)
				}
				n += c
			}
		}
	}
	return n
}

// mergeSpecs are the limits of the merge tests. Their keys live at least
// 7.5 s of real time after a write (token buckets miss a unit for 20 s,
// and the clock instants stay 7.5 s before any window end), so that a
// key never expires between the two stores' use of it in one test.
var mergeSpecs = []struct {
	alg ratelimit.Algorithm
	lim ratelimit.Limit
}{
	{ratelimit.TokenBucket, ratelimit.Limit{Rate: 1, Per: 20 * time.Second, Burst: 3}},
	{ratelimit.TokenBucket, ratelimit.Limit{Rate: 3, Per: time.Minute, Burst: 4}},
	{ratelimit.FixedWindow, ratelimit.Limit{Rate: 3, Per: 10 * time.Second}},
	{ratelimit.SlidingWindow, ratelimit.Limit{Rate: 4, Per: time.Minute, Buckets: 6}},
	{ratelimit.SlidingLog, ratelimit.Limit{Rate: 3, Per: 10 * time.Second}},
}

// randomDecisions returns n decisions on the keys prefix+"{t<tag>}:k<j>"
// (tags tags, 3 keys each; "{t0}:bad" holds a string, so that an item on
// it fails with WRONGTYPE), each of 1 to 3 items of one tag, some keys
// more than once: mostly plain decisions, some short, some refunds
// (which never merge).
func randomDecisions(r *rand.Rand, prefix string, tags, n int) []mergeDecision {
	ds := make([]mergeDecision, n)
	for k := range ds {
		tag := r.IntN(tags)
		items := make([]ratelimit.Item, 1+r.IntN(3))
		for i := range items {
			key := fmt.Sprintf("%s{t%d}:k%d", prefix, tag, r.IntN(3))
			if tag == 0 && r.IntN(8) == 0 {
				key = prefix + "{t0}:bad"
			}
			sp := mergeSpecs[r.IntN(len(mergeSpecs))]
			items[i] = ratelimit.Item{Key: key, Algorithm: sp.alg, Limit: sp.lim, Cost: int64(r.IntN(3)), Shadow: r.IntN(6) == 0}
		}
		d := mergeDecision{items: items, mode: modeDecide, merge: true}
		switch r.IntN(8) {
		case 0:
			d.mode, d.merge = modeRefund, false
		case 1, 2:
			d.mode = modeDecideShort
		}
		ds[k] = d
	}
	return ds
}

// withPrefix returns ds with every key's prefix from replaced by to.
func withPrefix(ds []mergeDecision, from, to string) []mergeDecision {
	out := make([]mergeDecision, len(ds))
	for k, d := range ds {
		d.items = slices.Clone(d.items)
		for i := range d.items {
			d.items[i].Key = to + strings.TrimPrefix(d.items[i].Key, from)
		}
		out[k] = d
	}
	return out
}

// keyState is what a key holds: its type, its contents, and whether it
// has a time to live.
func keyState(t *testing.T, c redis.UniversalClient, key string) string {
	t.Helper()
	ctx := context.Background()
	typ, err := c.Type(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	var v any
	switch typ {
	case "hash":
		v, err = c.HGetAll(ctx, key).Result()
	case "zset":
		v, err = c.ZRangeWithScores(ctx, key, 0, -1).Result()
	case "string":
		v, err = c.Get(ctx, key).Result()
	}
	if err != nil {
		t.Fatal(err)
	}
	ttl, err := c.PTTL(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s %v ttl>0:%v", typ, v, ttl > 0)
}

// sameReplies reports how the replies of the merged and separate calls
// of one pipeline differ ("" when they agree): values exactly, errors by
// their first word (the error code; a lone call's error also names the
// script's line).
func sameReplies(mv, sv []any, me, se []error) string {
	for k := range mv {
		switch {
		case (me[k] == nil) != (se[k] == nil):
			return fmt.Sprintf("decision %d: merged %v, %v; separate %v, %v", k, mv[k], me[k], sv[k], se[k])
		case me[k] != nil:
			if mc, sc := strings.Fields(me[k].Error())[0], strings.Fields(se[k].Error())[0]; mc != sc {
				return fmt.Sprintf("decision %d: merged error %v, separate %v", k, me[k], se[k])
			}
		case !reflect.DeepEqual(mv[k], sv[k]):
			return fmt.Sprintf("decision %d: merged %v, separate %v", k, mv[k], sv[k])
		}
	}
	return ""
}

// runMergeDifferential sends the same random pipelines through a store
// that merges (by up to 2 to 16, varying) and one that does not, on keys
// of two prefixes, with the same injected clock, and requires the same
// replies and, at the end, the same state in every key. sent sends each
// pipeline (send), so that the caller may count what it costs.
func runMergeDifferential(t *testing.T, addrs []string, seed uint64, tags int, sent func(merged bool, ds []mergeDecision, send func())) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 0))
	t.Logf("seed %d", seed)
	merged, separate := mergeStore(t, addrs, 16), mergeStore(t, addrs, 1)
	base := redistest.KeyPrefix(t)
	mp, sp := base+"m:", base+"s:"
	ctx := context.Background()
	for _, p := range []string{mp, sp} {
		if err := merged.client.Set(ctx, p+"{t0}:bad", "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Instants 2.5 s past a 10 s boundary: every window ends at least
	// 7.5 s after each (see mergeSpecs).
	epoch := time.Date(2026, 5, 1, 0, 0, 2, 500_000_000, time.UTC)
	tick := 0
	for round := range 40 {
		tick += r.IntN(3)
		now := epoch.Add(time.Duration(tick) * 10 * time.Second).UnixMicro()
		merged.run.maxMerge = 2 + r.IntN(15)
		ds := randomDecisions(r, mp, tags, 1+r.IntN(40))
		var mv, sv []any
		var me, se []error
		sent(true, ds, func() { mv, me = merged.sendDecisions(ds, now) })
		sds := withPrefix(ds, mp, sp)
		sent(false, sds, func() { sv, se = separate.sendDecisions(sds, now) })
		if diff := sameReplies(mv, sv, me, se); diff != "" {
			t.Fatalf("round %d (merge by %d): %s", round, merged.run.maxMerge, diff)
		}
	}
	for tag := range tags {
		for _, k := range []string{"k0", "k1", "k2", "bad"} {
			suffix := fmt.Sprintf("{t%d}:%s", tag, k)
			if m, s := keyState(t, merged.client, mp+suffix), keyState(t, merged.client, sp+suffix); m != s {
				t.Errorf("key %s: merged %s, separate %s", suffix, m, s)
			}
		}
	}
}

// TestMergedCallsMatchSeparate: random pipelines of plain decisions,
// short ones, refunds (which end a run of merged calls) and decisions
// that fail with WRONGTYPE, on one server, give the same replies and
// leave the same state merged as sent one call each, and they do merge
// (fewer script calls than decisions).
func TestMergedCallsMatchSeparate(t *testing.T) {
	srv := redistest.StartStandalone(t)
	var decisions, callsMerged int64
	runMergeDifferential(t, []string{srv.Addr}, rand.Uint64(), 3, func(merged bool, ds []mergeDecision, send func()) {
		if !merged {
			send()
			return
		}
		before := evalshaCalls(t, srv)
		send()
		decisions += int64(len(ds))
		callsMerged += evalshaCalls(t, srv) - before
	})
	if callsMerged >= decisions/2 {
		t.Errorf("%d decisions took %d script calls merged, want far fewer", decisions, callsMerged)
	}
}

// TestMergedCallsClusterSlots: on a Cluster, merged calls carry only
// decisions of one hash slot (a script call across slots fails with
// CROSSSLOT) and give what separate calls give; decisions of one slot do
// merge.
func TestMergedCallsClusterSlots(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	var decisions, callsMerged int64
	calls := func() int64 {
		var n int64
		for _, node := range c.Nodes() {
			n += evalshaCalls(t, node)
		}
		return n
	}
	runMergeDifferential(t, c.Addrs(), rand.Uint64(), 6, func(merged bool, ds []mergeDecision, send func()) {
		if !merged {
			send()
			return
		}
		before := calls()
		send()
		decisions += int64(len(ds))
		callsMerged += calls() - before
	})
	if callsMerged >= decisions*3/4 {
		t.Errorf("%d decisions took %d script calls merged, want fewer", decisions, callsMerged)
	}
}

// TestMergedCallErrorIsOwn: a decision of a merged call that fails (a
// key holding a string) fails alone: the decisions before and after it
// in the same call are decided, the later one seeing what the earlier
// took, and the call was one script call.
func TestMergedCallErrorIsOwn(t *testing.T) {
	srv := redistest.StartStandalone(t)
	s := mergeStore(t, []string{srv.Addr}, 16)
	p := redistest.KeyPrefix(t)
	srv.MustDo(t, "SET", p+"{a}bad", "x")
	bucket := func(key string) []ratelimit.Item {
		return []ratelimit.Item{{Key: key, Algorithm: ratelimit.TokenBucket, Limit: ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 2}, Cost: 1}}
	}
	before := evalshaCalls(t, srv)
	vals, errs := s.sendDecisions([]mergeDecision{
		{items: bucket(p + "{a}k"), mode: modeDecide, merge: true},
		{items: append(bucket(p+"{a}j"), bucket(p+"{a}bad")...), mode: modeDecide, merge: true},
		{items: bucket(p + "{a}k"), mode: modeDecideShort, merge: true},
	}, 0)
	if n := evalshaCalls(t, srv) - before; n != 1 {
		t.Errorf("3 decisions took %d script calls, want 1 merged", n)
	}
	if errs[1] == nil || !strings.HasPrefix(errs[1].Error(), "WRONGTYPE") {
		t.Errorf("decision on a string key: %v, %v; want WRONGTYPE", vals[1], errs[1])
	}
	for k, want := range map[int]int64{0: 1, 2: 0} {
		if errs[k] != nil {
			t.Fatalf("decision %d beside a failing one: %v", k, errs[k])
		}
		var res [1]ratelimit.Result
		var ext [1]itemReply
		ok, err := parseReply(vals[k], bucket(p+"{a}k"), []int{0}, res[:], ext[:], k == 2)
		if err != nil || !ok || res[0].Remaining != want {
			t.Errorf("decision %d: admitted %v, %+v, %v; want admitted with %d remaining", k, ok, res[0], err, want)
		}
	}
	// The failing decision wrote nothing: its first key is untouched.
	if n, err := s.client.Exists(context.Background(), p+"{a}j").Result(); err != nil || n != 0 {
		t.Errorf("key of the failed decision exists: %d, %v", n, err)
	}
}

// TestMergedCallAfterScriptFlush: a merged call that meets an empty script
// cache (NOSCRIPT) is sent again after the script is loaded, and each of
// its decisions runs exactly once.
func TestMergedCallAfterScriptFlush(t *testing.T) {
	srv := redistest.StartStandalone(t)
	s := mergeStore(t, []string{srv.Addr}, 16)
	p := redistest.KeyPrefix(t)
	var ds []mergeDecision
	for k := range 5 {
		ds = append(ds, mergeDecision{items: []ratelimit.Item{{Key: fmt.Sprintf("%s{a}%d", p, k), Algorithm: ratelimit.TokenBucket,
			Limit: ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 10}, Cost: 1}}, mode: modeDecideShort, merge: true})
	}
	for round, flush := range []bool{false, true} {
		if flush {
			srv.MustDo(t, "SCRIPT", "FLUSH")
		}
		vals, errs := s.sendDecisions(ds, 0)
		for k := range ds {
			var res [1]ratelimit.Result
			ok, err := parseReply(vals[k], ds[k].items, []int{0}, res[:], nil, true)
			if errs[k] != nil || err != nil || !ok || res[0].Remaining != int64(9-round) {
				t.Errorf("round %d (flushed %v), decision %d: %v, %v, admitted %v, %+v; want %d remaining", round, flush, k, errs[k], err, ok, res[0], 9-round)
			}
		}
	}
	info, _ := srv.MustDo(t, "INFO", "errorstats").(string)
	if !strings.Contains(info, "errorstat_NOSCRIPT:count=1") {
		t.Errorf("the flushed server answered no NOSCRIPT (or more than one): %q", info)
	}
}

// TestMergedCallsKeepDeadlines: with coalescing on and the server frozen,
// callers whose calls were queued, merged and sent together each fail
// (ErrUnavailable) by their own deadline; once the server runs again the
// store decides.
func TestMergedCallsKeepDeadlines(t *testing.T) {
	srv := redistest.StartStandalone(t)
	s := NewRedisStore(NewRedisClient(RedisClientOptions{Addrs: []string{srv.Addr}}), RedisOptions{
		Timeout: 300 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { _ = s.Close() })
	s.run.pinEvalsha()
	p := redistest.KeyPrefix(t)
	item := func(k int) []ratelimit.Item {
		return []ratelimit.Item{{Key: fmt.Sprintf("%s{a}%d", p, k), Algorithm: ratelimit.TokenBucket,
			Limit: ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 10}, Cost: 1}}
	}
	if _, err := s.Decide(context.Background(), item(0)); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	const callers = 24
	var wg sync.WaitGroup
	errs := make([]error, callers)
	late := make([]time.Duration, callers)
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			_, errs[g] = s.Decide(context.Background(), item(g))
			late[g] = time.Since(start) - 300*time.Millisecond
		}()
	}
	wg.Wait()
	srv.Resume()
	resumed = true
	for g := range callers {
		if !errors.Is(errs[g], ratelimit.ErrUnavailable) {
			t.Errorf("caller %d on a frozen server: %v, want ErrUnavailable", g, errs[g])
		}
		// Not a timing assertion of the store's speed: a caller kept a
		// whole second past its deadline was held by a pipeline bound to
		// another deadline (a loaded machine delays by milliseconds).
		if late[g] > time.Second {
			t.Errorf("missed deadline: caller %d returned %v after its deadline", g, late[g])
		}
	}
	if d, err := s.Decide(context.Background(), item(callers)); err != nil || !d.Allowed {
		t.Errorf("after the server resumed: %+v, %v", d, err)
	}
}

// TestUnitsBounds: units merges runs of calls that may merge, at most
// maxMerge calls and maxMergeArgs arguments each, keeps a call that may
// not merge apart and ends the run it cuts into, merges only calls of
// one slot on a Cluster and none on a client that shards by itself.
func TestUnitsBounds(t *testing.T) {
	item := func(key string, specs int) []ratelimit.Item {
		its := make([]ratelimit.Item, specs)
		for i := range its {
			its[i] = ratelimit.Item{Key: key, Algorithm: ratelimit.TokenBucket, Limit: ratelimit.Limit{Rate: 1, Per: time.Second, Burst: 1}, Cost: 1}
		}
		return its
	}
	call := func(key string, specs int, merge bool) *scriptCall {
		c := &scriptCall{}
		idx := make([]int, specs)
		for i := range idx {
			idx[i] = i
		}
		c.build(modeDecide, 0, false, item(key, specs), idx, nil)
		c.merge = merge
		return c
	}
	// shape describes units' result: per unit its number of calls, "."
	// for a call sent alone.
	shape := func(us []*scriptCall) string {
		var b strings.Builder
		for _, u := range us {
			if len(u.members) == 0 {
				b.WriteString(".")
			} else {
				b.WriteString(strconv.Itoa(len(u.members)))
			}
		}
		return b.String()
	}
	many := func(n int, key string, specs int, merge bool) []*scriptCall {
		var cs []*scriptCall
		for range n {
			cs = append(cs, call(key, specs, merge))
		}
		return cs
	}
	// Keys {a} and {b} hash to different slots, {a} and a key tagged
	// {a} to the same.
	a1, a2, b1 := "{a}x", "{a}y", "{b}x"
	if keySlot(a1) == keySlot(b1) {
		t.Fatal("test keys share a slot")
	}
	for _, tc := range []struct {
		name     string
		calls    []*scriptCall
		by       mergeBy
		maxMerge int
		want     string
	}{
		{"bounded by maxMerge", many(7, a1, 1, true), mergeAll, 3, "33."},
		{"one call is sent alone", many(1, a1, 1, true), mergeAll, 3, "."},
		{"merge 1 is off", many(3, a1, 1, true), mergeAll, 1, "..."},
		{"a call that may not merge ends the run", append(append(many(2, a1, 1, true), call(a1, 1, false)), many(2, a1, 1, true)...), mergeAll, 16, "2.2"},
		{"one server merges across slots", []*scriptCall{call(a1, 1, true), call(b1, 1, true), call(a2, 1, true)}, mergeAll, 16, "3"},
		{"a cluster merges by slot", []*scriptCall{call(a1, 1, true), call(b1, 1, true), call(a2, 1, true), call(b1, 1, true)}, mergeSlot, 16, "22"},
		{"a cluster ends the run of the slot only", []*scriptCall{call(a1, 1, true), call(b1, 1, true), call(a2, 1, false), call(a1, 1, true), call(b1, 1, true)}, mergeSlot, 16, ".2.."},
		{"a ring merges nothing", many(3, a1, 1, true), mergeNone, 16, "..."},
		// 2 + 300 arguments per call: three fit in 1024 arguments.
		{"bounded by arguments", many(4, a1, 300, true), mergeAll, 16, "3."},
		{"a call above the bound goes alone", append(many(1, a1, 1100, true), many(2, a1, 1, true)...), mergeAll, 16, ".2"},
		// 'm', the count, then per call its counts, mode, now and specs:
		// 2 + 2 * (2 + 2 + 507) = 1024 arguments merge, 2 more do not.
		{"exactly at the argument bound", many(2, a1, 507, true), mergeAll, 16, "2"},
		{"two arguments past the bound", many(2, a1, 508, true), mergeAll, 16, ".."},
		{"exactly at maxMerge", many(16, a1, 1, true), mergeAll, 16, "16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			owner := &scriptCall{}
			got := units(owner, tc.calls, tc.by, tc.maxMerge)
			if s := shape(got); s != tc.want {
				t.Fatalf("units %q, want %q", s, tc.want)
			}
			for _, u := range got {
				if len(u.members) == 0 {
					continue
				}
				if len(u.argv()) > maxMergeArgs {
					t.Errorf("merged call of %d arguments, above %d", len(u.argv()), maxMergeArgs)
				}
				for _, c := range u.members {
					if tc.by == mergeSlot && keySlot(c.keys[0]) != keySlot(u.members[0].keys[0]) {
						t.Errorf("merged call across slots: %s and %s", c.keys[0], u.members[0].keys[0])
					}
				}
			}
		})
	}
}

// TestMergedCallsCoalescedExact: concurrent Decides through the coalescer
// in EVALSHA mode, whose queued decisions merge, admit exactly what one
// shared bucket holds, and each caller's own bucket its own burst.
func TestMergedCallsCoalescedExact(t *testing.T) {
	srv := redistest.StartStandalone(t)
	s := NewRedisStore(NewRedisClient(RedisClientOptions{Addrs: []string{srv.Addr}}), RedisOptions{
		Timeout: time.Minute, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { _ = s.Close() })
	s.run.pinEvalsha()
	p := redistest.KeyPrefix(t)
	const callers, each, shared, own = 32, 40, 500, 15
	bucket := func(key string, burst int64) ratelimit.Item {
		return ratelimit.Item{Key: key, Algorithm: ratelimit.TokenBucket, Limit: ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: burst}, Cost: 1}
	}
	before := evalshaCalls(t, srv)
	var wg sync.WaitGroup
	var mu sync.Mutex
	sharedOK, ownOK := 0, make([]int, callers)
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				// Alternate: the shared bucket (a group of its own), then
				// the caller's own (one of its own tag).
				var it ratelimit.Item
				if i%2 == 0 {
					it = bucket(p+"{shared}b", shared)
				} else {
					it = bucket(fmt.Sprintf("%s{own%d}b", p, g), own)
				}
				d, err := s.Decide(context.Background(), []ratelimit.Item{it})
				if err != nil {
					t.Errorf("caller %d: %v", g, err)
					return
				}
				if d.Allowed {
					mu.Lock()
					if i%2 == 0 {
						sharedOK++
					} else {
						ownOK[g]++
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if want := min(shared, callers*each/2); sharedOK != want {
		t.Errorf("shared bucket admitted %d, want %d", sharedOK, want)
	}
	for g, n := range ownOK {
		if want := min(own, each/2); n != want {
			t.Errorf("caller %d's bucket admitted %d, want %d", g, n, want)
		}
	}
	t.Logf("%d decisions took %d script calls", callers*each, evalshaCalls(t, srv)-before)
}

// TestMergedCallAtMaxmemory pins the one way a merged call differs from
// separate calls (see merge.go): at maxmemory with noeviction, a decision
// that follows one that wrote (a concurrency decision on a key holding
// slots) in the same merged call is decided and written, where alone it
// fails with OOM. The decision before it is the same either way.
func TestMergedCallAtMaxmemory(t *testing.T) {
	srv := redistest.StartStandalone(t)
	p := redistest.KeyPrefix(t)
	slot := func(holder string) []ratelimit.Item {
		return []ratelimit.Item{{Key: p + "{a}c", Algorithm: ratelimit.Concurrency, Limit: ratelimit.Limit{Max: 5, Per: time.Hour}, Cost: 1, Holder: holder}}
	}
	bucket := []ratelimit.Item{{Key: p + "{a}b", Algorithm: ratelimit.TokenBucket, Limit: ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 10}, Cost: 1}}
	for _, maxMerge := range []int{16, 1} {
		s := mergeStore(t, []string{srv.Addr}, maxMerge)
		if err := s.client.Del(context.Background(), p+"{a}c", p+"{a}b").Err(); err != nil {
			t.Fatal(err)
		}
		if _, errs := s.sendDecisions([]mergeDecision{{items: slot("h1"), mode: modeDecide, merge: true}}, 0); errs[0] != nil {
			t.Fatal(errs[0])
		}
		srv.MustDo(t, "CONFIG", "SET", "maxmemory-policy", "noeviction")
		srv.MustDo(t, "CONFIG", "SET", "maxmemory", "1")
		_, errs := s.sendDecisions([]mergeDecision{{items: slot("h2"), mode: modeDecide, merge: true}, {items: bucket, mode: modeDecide, merge: true}}, 0)
		srv.MustDo(t, "CONFIG", "SET", "maxmemory", "0")
		if errs[0] != nil {
			t.Errorf("merged by %d: the concurrency decision failed: %v", maxMerge, errs[0])
		}
		if oom := errs[1] != nil && strings.HasPrefix(errs[1].Error(), "OOM"); oom != (maxMerge == 1) {
			t.Errorf("merged by %d: the token bucket decision after it: %v; want OOM only alone", maxMerge, errs[1])
		}
	}
}
