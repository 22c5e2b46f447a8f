package redisstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
)

// TestBucketAloneSameAsGeneralPath: a token bucket decided alone takes a
// path of its own (lua/bucketalone.lua), which judges it without
// decide_items and, on a key without state, copies a decision worked out
// once per item. The library with that path and one with it turned off
// decide the same calls on keys of their own, at the same caller times,
// and must give the same replies, leave the same state and set the same
// time to live after every call: on absent keys, on keys the call before
// wrote, once the bucket is full again, on a hash without the field a,
// on another algorithm's key, on a key in debt or of another per and on
// a key of another type, for admissions, denials, shadow items, cost 0,
// a capacity of 2^53, a per not in whole milliseconds, a rate above per,
// the caller's clock going back, and times to live rounded up to the
// millisecond, in the long and the short reply, called as a function
// (the EVALSHA script parses its items on every call, so it never finds
// an item parsed and never takes the path). (Times to live are of a
// second or more: Redis 7.0 reads its clock afresh for each command of a
// transaction, so a key of a few milliseconds may run out before the
// transaction's next command reads it.)
func TestBucketAloneSameAsGeneralPath(t *testing.T) {
	srv := redistest.Shared(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	ctx := context.Background()

	body := assembleBody()
	off := strings.Replace(body, "local BUCKET_ALONE = true", "local BUCKET_ALONE = false", 1)
	if off == body {
		t.Fatal("the library has no BUCKET_ALONE switch to turn off")
	}
	onName, onSrc := assembleLibrary(body)
	offName, offSrc := assembleLibrary(off)
	for _, src := range []string{onSrc, offSrc} {
		if err := c.FunctionLoadReplace(ctx, src).Err(); err != nil {
			t.Fatal(err)
		}
	}

	// Specs: algorithm,rate,per,burst,cost,shadow,cs,ce,cn (see items.lua).
	specs := []string{
		"1,10,10000000,5,1,0,0,0,0",          // admitted, a time to live of 1 s
		"1,10,10000000,5,5,0,0,0,0",          // the whole burst
		"1,10,10000000,5,0,0,0,0,0",          // cost 0: nothing written
		"1,10,10000000,5,6,0,0,0,0",          // above the burst: denied
		"1,10,10000000,5,6,1,0,0,0",          // the same in shadow: admitted, nothing taken
		"1,7,10000000,5,1,0,0,0,0",           // 1 428 572 µs to live, written as 1429 ms
		"1,3,7000000,2,1,0,0,0,0",            // a level not in whole units of rate
		"1,3,1048576,8589934592,7,0,0,0,0",   // a capacity of 2^53, per not in whole ms
		"1,1000,999,5000000,3000000,0,0,0,0", // a rate above per: 2 997 000 µs to live
	}
	// The calls on each key, at caller times (µs): the first, the same
	// again (on the key the first wrote), later but not yet full, earlier
	// (the clock went back: the stamp stays ahead of now), on the key
	// expired (deleted first), and once it is full again. A key's
	// expiry is set to park (an hour ahead) after each call, once read, so
	// that it expires only when a step says so, however slow the server
	// is, and a call that leaves it as it was is told apart.
	const t0 = int64(1_700_000_000_000_000)
	steps := []struct {
		now    int64
		expire bool
	}{{t0, false}, {t0, false}, {t0 + 150_000, false}, {t0 + 100_000, false}, {t0 + 150_001, true}, {t0 + 200_000, false}, {t0 + 100_000_000_000, false}}
	// What a key holds before the first call, written the same on both
	// sides.
	setups := map[string]func(key string){
		"absent":     func(string) {},
		"no field a": func(key string) { c.HSet(ctx, key, "x", "1") },
		"window":     func(key string) { c.HSet(ctx, key, "a", "2", "n", "3", "w", "1", "p", "1000000") },
		"string":     func(key string) { c.Set(ctx, key, "v", 0) },
		"other per":  func(key string) { c.HSet(ctx, key, "a", "1", "l", "5", "s", fmt.Sprint(t0-10), "p", "1") },
		"in debt":    func(key string) { c.HSet(ctx, key, "a", "1", "l", "-3000000", "s", fmt.Sprint(t0), "p", "1000000") },
	}

	prefix := redistest.KeyPrefix(t)
	park := time.Now().Add(time.Hour).UnixMilli()
	// call runs the function fn on key and reads what it left in one
	// transaction. The server's clock before and after bound the time to
	// live.
	call := func(fn, key, mode, spec string, now int64) (any, ttlRange, string) {
		var reply *redis.Cmd
		var exp *redis.IntCmd
		var typ *redis.StatusCmd
		var fields *redis.MapStringStringCmd
		before := c.Time(ctx)
		_, _ = c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			reply = pipe.FCall(ctx, fn, []string{key}, mode, fmt.Sprint(now), spec)
			exp = redis.NewIntCmd(ctx, "pexpiretime", key)
			_ = pipe.Process(ctx, exp)
			typ = pipe.Type(ctx, key)
			fields = pipe.HGetAll(ctx, key)
			pipe.PExpireAt(ctx, key, time.UnixMilli(park))
			return nil
		})
		after := c.Time(ctx)
		var v any = reply.Val()
		if err := reply.Err(); err != nil {
			// Without the name of the library and the line, which differ.
			msg, _, _ := strings.Cut(err.Error(), " script: ")
			v = "error: " + msg
		}
		p, err := exp.Result()
		if err != nil || before.Err() != nil || after.Err() != nil || typ.Err() != nil {
			t.Fatalf("reading %s: %v %v %v %v", key, err, before.Err(), after.Err(), typ.Err())
		}
		r := ttlRange{p, p}
		if p == park {
			r = ttlRange{-3, -3} // the call left the expiry as it was
		} else if p >= 0 {
			r = ttlRange{p - after.Val().UnixMilli(), p - before.Val().UnixMilli()}
		}
		state := typ.Val()
		if state == "hash" {
			state += fmt.Sprint(fields.Val())
		}
		return v, r, state
	}

	n := 0
	for setup, prepare := range setups {
		for si, spec := range specs {
			for _, mode := range []string{"c", "d"} {
				n++
				key := fmt.Sprintf("{ba%d}", n)
				onKey, offKey := prefix+"on"+key, prefix+"off"+key
				prepare(onKey)
				prepare(offKey)
				t.Cleanup(func() { c.Del(ctx, onKey, offKey) })
				for step, st := range steps {
					if st.expire {
						c.Del(ctx, onKey, offKey)
					}
					gotOn, ttlOn, stateOn := call(onName, onKey, mode, spec, st.now)
					gotOff, ttlOff, stateOff := call(offName, offKey, mode, spec, st.now)
					where := fmt.Sprintf("%s key, spec %d (%s), mode %s, call %d", setup, si, spec, mode, step)
					if fmt.Sprint(gotOn) != fmt.Sprint(gotOff) {
						t.Errorf("%s: reply %v, general path %v", where, gotOn, gotOff)
					}
					if stateOn != stateOff {
						t.Errorf("%s: state %s, general path %s", where, stateOn, stateOff)
					}
					if !ttlOn.overlaps(ttlOff) {
						t.Errorf("%s: time to live %v ms, general path %v ms", where, ttlOn, ttlOff)
					}
				}
			}
		}
	}
}

// TestBucketAloneServerClock: a call that reads the server clock (an
// empty now) decides at TIME's seconds and microseconds, which the entry point
// joins into a text (the microseconds padded to six digits) and converts
// by arithmetic: the time the reply gives and the stamp a full bucket's
// first admission writes must be the same instant, for microseconds of
// six digits and of fewer. Calls are sent until one has decided in the
// first tenth of a second (fewer digits), which the server's clock
// reaches within a second.
func TestBucketAloneServerClock(t *testing.T) {
	c := libraryClient(t)
	ctx := context.Background()
	prefix := redistest.KeyPrefix(t)
	const calls = 20
	replies := make([]*redis.Cmd, calls)
	stamps := make([]*redis.StringCmd, calls)
	short, long := 0, 0
	for start := time.Now(); short == 0 || long == 0; {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("missed deadline, not a wrong answer: in 30 s, %d calls decided in a second's first tenth and %d after it", short, long)
		}
		var before, after *redis.TimeCmd
		_, err := c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			before = pipe.Time(ctx)
			for i := range calls {
				key := fmt.Sprintf("%sclock%d", prefix, i)
				replies[i] = pipe.FCall(ctx, libraryName, []string{key}, modeDecideShort, "", "1,1,10000000,5,1,0,0,0,0")
				stamps[i] = pipe.HGet(ctx, key, "s")
				pipe.Del(ctx, key)
			}
			after = pipe.Time(ctx)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// A second of slack either side: the bound only tells a time in
		// microseconds from one in other units or scaled wrong, whatever
		// the wall clock does.
		lo, hi := before.Val().Add(-time.Second).UnixMicro(), after.Val().Add(time.Second).UnixMicro()
		for i := range calls {
			v, err := replies[i].Slice()
			if err != nil || len(v) != 7 {
				t.Fatalf("call %d: reply %v, %v", i, v, err)
			}
			now, _ := v[6].(int64)
			if s := stamps[i].Val(); s != fmt.Sprint(now) {
				t.Fatalf("decided at %d, stamp written %q", now, s)
			}
			if now < lo || now > hi {
				t.Fatalf("decided at %d µs, server clock %d..%d", now, lo, hi)
			}
			if now%1_000_000 < 100_000 {
				short++
			} else {
				long++
			}
		}
	}
}
