package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
)

// prevLibrary is the function library of the released version, 483afd4
// (which passes 11 arguments per item), byte for byte as a gateway of that
// version loads it.
//
//go:generate ../../scripts/freeze-lua-library.sh 483afd49bcae769eb8d66246d098a20d62bda3ba
//go:embed testdata/library_483afd4.lua
var prevLibrary string

// prevArgs are the FCALL arguments of the previous library: the items'
// keys (and to settle the marker), mode, now, then per item algorithm,
// rate, per, burst, cost, shadow, want (want[i], 0 when want is nil; to
// settle, the reservation's time), the calendar bounds and the holder, and
// to settle the marker's time to live in ms.
func prevArgs(mode string, nowUS int64, items []ratelimit.Item, want []int64, marker string, ttl time.Duration) []any {
	name := strings.TrimPrefix(strings.SplitN(prevLibrary, "\n", 2)[0], "#!lua name=")
	nkeys := len(items)
	if mode == modeSettle {
		nkeys++
	}
	args := []any{"fcall", name, nkeys}
	for _, it := range items {
		args = append(args, it.Key)
	}
	if mode == modeSettle {
		args = append(args, marker)
	}
	args = append(args, mode, strconv.FormatInt(nowUS, 10))
	for i, it := range items {
		shadow := 0
		if it.Shadow {
			shadow = 1
		}
		var w int64
		if want != nil {
			w = want[i]
		}
		var cs, ce, cn int64
		if it.Limit.Calendar.Set() {
			cs, ce, cn = calendarArgs(it.Limit.Calendar, nowUS)
		}
		args = append(args, int(it.Algorithm), rateArg(it), it.Limit.Per.Microseconds(), burstArg(it), it.Cost, shadow, w, cs, ce, cn, it.Holder)
	}
	if mode == modeSettle {
		args = append(args, ttl.Milliseconds())
	}
	return args
}

// compatStep is one call of the compatibility sequence. The items' keys
// and the marker are roles ("main", "second", "m<step>"), made keys of one
// version's set by the caller.
type compatStep struct {
	mode   string
	items  []ratelimit.Item
	want   []int64 // per item; nil for none. To settle: the reservation's time (µs)
	marker string  // to settle
}

// compatStepAt is step of the sequence for the limit l of algorithm alg
// at now (µs): decisions of cost 1 and 2, reservations (want 4 > cost),
// evaluations, refunds (a concurrency slot's release), renewals of
// concurrency slots, and (for the other algorithms) settlements of
// signed deltas, one of them sent twice under one marker; half of the
// calls carry a second item on a key of its own.
func compatStepAt(step int, alg ratelimit.Algorithm, l ratelimit.Limit, now int64) compatStep {
	conc := alg == ratelimit.Concurrency
	st := compatStep{mode: modeDecide}
	cost, holder := int64(1), fmt.Sprintf("h%d", step)
	var want int64
	switch {
	case step%7 == 3:
		st.mode, holder = modeRefund, fmt.Sprintf("h%d", step-1)
	case step%11 == 5:
		st.mode, cost = modeEval, 0
	case step%5 == 4 && conc:
		st.mode, holder = modeRenew, fmt.Sprintf("h%d", step-2)
	case step%5 == 4:
		st.mode, cost = modeSettle, []int64{-3, 2, -1, 4}[step/5%4]
		st.marker = fmt.Sprintf("m%d", step)
		if step%10 == 9 {
			st.marker = fmt.Sprintf("m%d", step-5) // settled already: changes nothing
		}
		if step%10 == 4 {
			want = now - 2*170_000 // the reservation's time
		}
	case step%3 == 1 && !conc:
		cost = 2
	case step%4 == 2 && !conc:
		want = 4
	}
	st.items = []ratelimit.Item{{Key: "main", Algorithm: alg, Limit: l, Cost: cost, Holder: holder}}
	if step%4 < 2 {
		second := ratelimit.Item{Key: "second", Algorithm: ratelimit.TokenBucket, Limit: ratelimit.Limit{Rate: 1, Per: time.Second, Burst: 3}, Cost: cost}
		if conc {
			second = ratelimit.Item{Key: "second", Algorithm: ratelimit.Concurrency, Limit: ratelimit.Limit{Max: 1, Per: 1500 * time.Millisecond}, Cost: 1, Holder: holder}
		}
		if st.mode == modeSettle {
			second.Cost = -1
		}
		st.items = append(st.items, second)
	}
	if !conc {
		for i := range st.items {
			st.items[i].Holder = ""
		}
	}
	if conc && st.mode != modeEval {
		for i := range st.items {
			st.items[i].Cost = 1
		}
	}
	if want != 0 {
		st.want = make([]int64, len(st.items))
		st.want[0] = want
		if st.mode == modeSettle {
			for i := range st.want {
				st.want[i] = want
			}
		}
	}
	return st
}

// compatOutcome is what one version's call of a step replied and left:
// per role, the key's time to live in ms (see ttlRange) and its state.
type compatOutcome struct {
	reply any
	ttl   map[string]ttlRange
	state map[string]string
}

// ttlRange is a key's time to live as set by a call, in ms: the key's
// expiry (PEXPIRETIME) less the server's clock before and after the call
// (TIME), so that it holds what the call set (lo <= ttl <= hi) however
// long the server took. A key without expiry is {-1, -1}, an absent one
// {-2, -2}, and one whose expiry the call left as it was (still the
// parked one, see runCompatStep) {-3, -3}.
type ttlRange struct{ lo, hi int64 }

func (r ttlRange) overlaps(o ttlRange) bool { return max(r.lo, o.lo) <= min(r.hi, o.hi) }

// runCompatStep runs st as one version (the previous library when prev is
// set) on the keys key(role) at now, then reads each role's time to live
// and state and parks the keys: sets their expiry to park (Unix ms, far
// ahead), so that they expire only when the test's simulated clock says
// so (see TestStoredStateCompatibleWithPreviousVersion), and a call that
// leaves a key's expiry alone is told from one that removes it. A renewal
// first sets each item's key, when present, to live per/2: what any key
// of a slot taken before now has left, below per.
func runCompatStep(t *testing.T, c *redis.Client, st compatStep, prev bool, key func(string) string, now, park int64, roles []string) compatOutcome {
	t.Helper()
	ctx := context.Background()
	items := slices.Clone(st.items)
	for i := range items {
		items[i].Key = key(items[i].Key)
	}
	var args []any
	switch {
	case prev:
		args = prevArgs(st.mode, now, items, st.want, key(st.marker), ratelimit.SettleWindow)
	case st.mode == modeSettle:
		call := &scriptCall{}
		call.buildSettle(now, true, items, st.want, []int{0, 1}[:len(items)], key(st.marker), ratelimit.SettleWindow)
		args = call.cmd(ctx, true).Args()
	default:
		call := &scriptCall{}
		call.build(st.mode, now, true, items, []int{0, 1}[:len(items)], st.want)
		args = call.cmd(ctx, true).Args()
	}
	pipe := c.Pipeline()
	if st.mode == modeRenew {
		for _, it := range items {
			pipe.PExpire(ctx, it.Key, it.Limit.Per/2)
		}
	}
	before := pipe.Time(ctx)
	reply := pipe.Do(ctx, args...)
	exp := make([]*redis.IntCmd, len(roles))
	for i, role := range roles {
		exp[i] = redis.NewIntCmd(ctx, "pexpiretime", key(role))
		_ = pipe.Process(ctx, exp[i])
	}
	after := pipe.Time(ctx)
	for _, role := range roles {
		pipe.PExpireAt(ctx, key(role), time.UnixMilli(park))
	}
	_, _ = pipe.Exec(ctx)
	if err := reply.Err(); err != nil {
		t.Fatalf("%s (previous version: %v): %v", st.mode, prev, err)
	}
	o := compatOutcome{reply: reply.Val(), ttl: map[string]ttlRange{}, state: map[string]string{}}
	if !prev && (st.mode == modeDecide || st.mode == modeEval) {
		o.reply = inPrevOrder(o.reply, len(items))
	}
	b, a := before.Val().UnixMilli(), after.Val().UnixMilli()
	for i, role := range roles {
		p, err := exp[i].Result()
		if err != nil || before.Err() != nil || after.Err() != nil {
			t.Fatalf("reading %s: %v %v %v", role, err, before.Err(), after.Err())
		}
		r := ttlRange{p, p}
		if p == park {
			r = ttlRange{-3, -3}
		} else if p >= 0 {
			r = ttlRange{p - a, p - b}
		}
		o.ttl[role] = r
		o.state[role] = storedState(c, key(role))
	}
	return o
}

// inPrevOrder returns the decide or evaluate reply v of this version for n
// items in the order of the previous version's: admitted, then per item
// allowed, remaining, retry, reset, remaining and reset before, taken and
// debt, then the time. The values are the same; this version puts those
// a refund needs after the time, so that a short reply can leave them out.
// A reply of another length is returned as it is.
func inPrevOrder(v any, n int) any {
	r, ok := v.([]any)
	if !ok || len(r) != 2+(resultValues+refundValues)*n {
		return v
	}
	out := []any{r[0]}
	for i := range n {
		o, e := 1+resultValues*i, 2+resultValues*n+refundValues*i
		out = append(out, r[o:o+4]...)
		out = append(out, r[e:e+refundValues]...)
		out = append(out, r[o+4])
	}
	return append(out, r[1+resultValues*n])
}

// renewalTakenBack reports whether this version's renewal reply cur
// differs from the previous version's old only as intended: a holder whose
// slot is gone takes it back when the key has room, which this version
// answers 2 (taken back) and the previous one answered 0 (lost, changing
// nothing).
func renewalTakenBack(cur, old any) bool {
	c, ok1 := cur.([]any)
	o, ok2 := old.([]any)
	if !ok1 || !ok2 || len(c) != len(o) {
		return false
	}
	diff := false
	for i := range c {
		switch {
		case reflect.DeepEqual(c[i], o[i]):
		case c[i] == int64(2) && o[i] == int64(0):
			diff = true
		default:
			return false
		}
	}
	return diff
}

// TestStoredStateCompatibleWithPreviousVersion: in a rolling deploy,
// gateways of the released version (483afd4) and of this one decide on
// the same keys, each through its own library. For every algorithm, one
// set of keys is used by the two versions in turn, one by this version
// alone and one by the previous version alone, through the same sequence
// of decisions, reservations, evaluations, refunds, settlements and
// concurrency acquisitions, renewals and releases, of one and two items,
// at the same injected times: every reply, the state and the time to live
// of every key after every step are the same for the three, so each
// version reads what the other writes as its own and expires it alike.
//
// Times to live are compared as set by the call (see ttlRange); the keys
// are then parked a day ahead, and the test deletes a key when the
// simulated clock passes the expiry this version set, so that real time
// never expires a key between steps.
//
// One difference is intended: a renewal by a holder whose slot is gone,
// on a key with room, takes the slot back in this version (reply 2, the
// slot and the key's expiry written) where 483afd4 answered lost (0) and
// wrote nothing. Such a step is checked to differ in exactly that way;
// then every set of keys is given this version's state, and the sequence
// goes on from it.
func TestStoredStateCompatibleWithPreviousVersion(t *testing.T) {
	ctx := context.Background()
	c := libraryClient(t)
	if err := c.FunctionLoad(ctx, prevLibrary).Err(); err != nil {
		t.Fatal(err)
	}
	prefix := redistest.KeyPrefix(t)
	month := ratelimit.Calendar{Unit: ratelimit.Month}
	limits := map[string]struct {
		alg   ratelimit.Algorithm
		limit ratelimit.Limit
	}{
		"token_bucket":   {ratelimit.TokenBucket, ratelimit.Limit{Rate: 2, Per: time.Second, Burst: 5}},
		"fixed_window":   {ratelimit.FixedWindow, ratelimit.Limit{Rate: 3, Per: time.Second}},
		"calendar":       {ratelimit.FixedWindow, ratelimit.Limit{Rate: 20, Per: 31 * 24 * time.Hour, Calendar: month}},
		"sliding_window": {ratelimit.SlidingWindow, ratelimit.Limit{Rate: 4, Per: time.Second}},
		"sliding_log":    {ratelimit.SlidingLog, ratelimit.Limit{Rate: 3, Per: time.Second}},
		"concurrency":    {ratelimit.Concurrency, ratelimit.Limit{Max: 2, Per: 2 * time.Second}},
	}
	whos := []string{"both", "this", "prev"}
	t0 := time.Date(2026, 3, 31, 23, 59, 57, 0, time.UTC).UnixMicro() // the calendar window turns
	park := time.Now().Add(24 * time.Hour).UnixMilli()                // see runCompatStep
	for name, l := range limits {
		t.Run(name, func(t *testing.T) {
			key := func(who string) func(string) string {
				return func(role string) string { return fmt.Sprintf("%s{compat:%s}:%s:%s", prefix, name, who, role) }
			}
			// sim is the simulated expiry (ms) of each role's keys that
			// have one.
			sim := map[string]int64{}
			stored, expired, settled, takenBack := 0, 0, 0, 0
			for step := range 60 {
				now := t0 + int64(step)*170_000
				nowMS := now / 1000
				for role, at := range sim {
					if at <= nowMS {
						for _, who := range whos {
							c.Del(ctx, key(who)(role))
						}
						delete(sim, role)
						expired++
					}
				}
				st := compatStepAt(step, l.alg, l.limit, now)
				roles := []string{"main", "second"}
				if st.mode == modeSettle {
					roles = append(roles, st.marker)
				}
				var outs [3]compatOutcome
				var prevRun [3]bool
				for k, who := range whos {
					prevRun[k] = who == "prev" || who == "both" && step%2 == 1
					outs[k] = runCompatStep(t, c, st, prevRun[k], key(who), now, park, roles)
				}
				what := fmt.Sprintf("step %d (%s, items %d, cost %d, want %v)", step, st.mode, len(st.items), st.items[0].Cost, st.want)
				if st.mode == modeRenew && renewalTakenBack(outs[1].reply, outs[2].reply) {
					// The intended difference (see above).
					for k := range whos {
						if cur := outs[k].reply; !reflect.DeepEqual(cur, outs[1].reply) && (!prevRun[k] || !reflect.DeepEqual(cur, outs[2].reply)) {
							t.Fatalf("%s: %s replied %v; this version %v, the previous %v", what, whos[k], cur, outs[1].reply, outs[2].reply)
						}
					}
					takenBack++
					for _, role := range roles {
						dump := c.Dump(ctx, key("this")(role)).Val()
						for k, who := range whos {
							if prevRun[k] {
								c.Del(ctx, key(who)(role))
								if dump != "" {
									c.Restore(ctx, key(who)(role), 0, dump)
									c.PExpireAt(ctx, key(who)(role), time.UnixMilli(park)) // as this version's key is
								}
							}
						}
					}
				} else {
					if !reflect.DeepEqual(outs[0].reply, outs[1].reply) || !reflect.DeepEqual(outs[0].reply, outs[2].reply) {
						t.Fatalf("%s: both versions %v, this version %v, the previous %v", what, outs[0].reply, outs[1].reply, outs[2].reply)
					}
					for _, role := range roles {
						s := [3]string{outs[0].state[role], outs[1].state[role], outs[2].state[role]}
						if s[0] != s[1] || s[0] != s[2] {
							t.Fatalf("%s: stored state of %s: both versions %s, this version %s, the previous %s", what, role, s[0], s[1], s[2])
						}
						r := [3]ttlRange{outs[0].ttl[role], outs[1].ttl[role], outs[2].ttl[role]}
						if !r[0].overlaps(r[1]) || !r[0].overlaps(r[2]) || !r[1].overlaps(r[2]) {
							t.Fatalf("%s: time to live (ms, [lo hi]) of %s: both versions %v, this version %v, the previous %v", what, role, r[0], r[1], r[2])
						}
					}
				}
				if st.mode == modeSettle && reflect.DeepEqual(outs[1].reply, []any{int64(1)}) {
					settled++
				}
				// The simulated clock takes this version's expiry. A key
				// whose expiry the call left alone (parked, or a renewal's
				// per/2) keeps its simulated one; a key without one never
				// expires.
				for _, role := range roles {
					r := outs[1].ttl[role]
					switch {
					case r.lo == -2 || r.lo == -1:
						delete(sim, role)
					case r.lo == -3:
					case st.mode == modeRenew && role != "main" && role != "second":
					case st.mode == modeRenew && renewedHalf(st, role, r):
					default:
						sim[role] = nowMS + r.hi
					}
				}
				if outs[1].state["main"] != "none" {
					stored++
				}
			}
			if stored < 10 || expired == 0 {
				t.Errorf("a state was stored after %d steps of 60 and keys expired %d times; the sequence tests too little", stored, expired)
			}
			if l.alg == ratelimit.Concurrency && takenBack == 0 {
				t.Errorf("no renewal took a lost slot back; the sequence misses the versions' one intended difference")
			}
			if l.alg != ratelimit.Concurrency && settled == 0 {
				t.Errorf("no settlement applied; the sequence tests too little")
			}
		})
	}
}

// renewedHalf reports whether r, the time to live of role's key after the
// renewal st, is the per/2 it was given before the call (the call left
// the expiry alone).
func renewedHalf(st compatStep, role string, r ttlRange) bool {
	for _, it := range st.items {
		if it.Key == role {
			h := (it.Limit.Per / 2).Milliseconds()
			return r.lo <= h && h <= r.hi
		}
	}
	return false
}

// storedState is the type and contents of key.
func storedState(c *redis.Client, key string) string {
	ctx := context.Background()
	typ := c.Type(ctx, key).Val()
	switch typ {
	case "hash":
		return fmt.Sprint(typ, c.HGetAll(ctx, key).Val())
	case "zset":
		return fmt.Sprint(typ, c.ZRangeWithScores(ctx, key, 0, -1).Val())
	}
	return typ
}

// TestTwoLimitsOnOneKeySavedWithTheLast: when items of two limits (two
// window lengths) change one key in a call, the key is saved with the
// limit of the last one, its per included, as every earlier version did,
// even when the key held the first one's per before: a state saved under
// one per and read under another would count on the wrong grid.
func TestTwoLimitsOnOneKeySavedWithTheLast(t *testing.T) {
	ctx := context.Background()
	c := libraryClient(t)
	prefix := redistest.KeyPrefix(t)
	for _, alg := range []ratelimit.Algorithm{ratelimit.TokenBucket, ratelimit.FixedWindow} {
		key := prefix + "{two}:" + alg.String()
		long := ratelimit.Item{Key: key, Algorithm: alg, Limit: ratelimit.Limit{Rate: 10, Per: 2 * time.Second, Burst: 10}, Cost: 1}
		short := long
		short.Limit.Per = time.Second
		now := int64(1_700_000_000_000_000)
		for _, items := range [][]ratelimit.Item{{long}, {long, short}} {
			call := &scriptCall{}
			idx := make([]int, len(items))
			for i := range idx {
				idx[i] = i
			}
			call.build(modeDecide, now, true, items, idx, nil)
			if err := c.Do(ctx, call.cmd(ctx, true).Args()...).Err(); err != nil {
				t.Fatalf("%v: %v", alg, err)
			}
			now += 100_000
		}
		if p := c.HGet(ctx, key, "p").Val(); p != "1000000" {
			t.Errorf("%v: a key changed last by a limit of per 1s holds p = %q (%s), want 1000000", alg, p, storedState(c, key))
		}
	}
}
