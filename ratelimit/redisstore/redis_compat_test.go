package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
)

// prevLibrary is the function library of an earlier version (71e0678,
// which passed 11 arguments per item), as a gateway of that version loads
// it.
//
//go:embed testdata/library_71e0678.lua
var prevLibrary string

// prevArgs are the FCALL arguments of the earlier library for items idx
// of items: keys, mode, now, then per item algorithm, rate, per, burst,
// cost, shadow, want, the calendar bounds and the holder.
func prevArgs(mode string, nowUS int64, items []ratelimit.Item) []any {
	name := strings.TrimPrefix(strings.SplitN(prevLibrary, "\n", 2)[0], "#!lua name=")
	args := []any{"fcall", name, len(items)}
	for _, it := range items {
		args = append(args, it.Key)
	}
	args = append(args, mode, strconv.FormatInt(nowUS, 10))
	for _, it := range items {
		shadow := 0
		if it.Shadow {
			shadow = 1
		}
		var cs, ce, cn int64
		if it.Limit.Calendar.Set() {
			cs, ce, cn = calendarArgs(it.Limit.Calendar, nowUS)
		}
		args = append(args, int(it.Algorithm), rateArg(it), it.Limit.Per.Microseconds(), burstArg(it), it.Cost, shadow, 0, cs, ce, cn, it.Holder)
	}
	return args
}

// TestStoredStateCompatibleWithPreviousVersion: in a rolling deploy,
// gateways of the previous version and of this one decide on the same
// keys, each through its own library. For every algorithm, one key is
// decided on by the two versions in turn, one by this version alone and
// one by the previous version alone, through the same sequence of
// decisions, evaluations, refunds and renewals at the same times: every
// reply and the stored state after every step are the same for the three,
// so each version reads what the other writes as its own.
func TestStoredStateCompatibleWithPreviousVersion(t *testing.T) {
	srv := redistest.StartStandalone(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	if err := c.FunctionLoad(ctx, prevLibrary).Err(); err != nil {
		t.Fatal(err)
	}
	if err := loadLibrary(ctx, c); err != nil {
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
	t0 := time.Date(2026, 3, 31, 23, 59, 57, 0, time.UTC).UnixMicro() // the calendar window turns
	for name, l := range limits {
		t.Run(name, func(t *testing.T) {
			keys := map[string]string{}
			for _, who := range []string{"both", "this", "prev"} {
				keys[who] = fmt.Sprintf("%s{compat:%s}:%s", prefix, name, who)
			}
			stored := 0
			for step := range 48 {
				now := t0 + int64(step)*170_000
				mode, cost, holder := modeDecide, int64(1), fmt.Sprintf("h%d", step)
				switch {
				case step%7 == 3:
					mode, holder = modeRefund, fmt.Sprintf("h%d", step-1)
				case step%11 == 5:
					mode, cost = modeEval, 0
				case step%5 == 4 && l.alg == ratelimit.Concurrency:
					mode, holder = modeRenew, fmt.Sprintf("h%d", step-2)
				case step%3 == 1 && l.alg != ratelimit.Concurrency:
					cost = 2
				}
				var replies []any
				var states []string
				for _, who := range []string{"both", "this", "prev"} {
					it := ratelimit.Item{Key: keys[who], Algorithm: l.alg, Limit: l.limit, Cost: cost}
					if l.alg == ratelimit.Concurrency {
						it.Holder = holder
						if mode == modeRefund || mode == modeRenew {
							it.Cost = 1
						}
					}
					items := []ratelimit.Item{it}
					var args []any
					if who == "prev" || who == "both" && step%2 == 1 {
						args = prevArgs(mode, now, items)
					} else {
						call := &scriptCall{}
						call.build(mode, now, true, items, []int{0}, nil)
						args = call.cmd(ctx, true).Args()
					}
					v, err := c.Do(ctx, args...).Result()
					if err != nil {
						t.Fatalf("step %d (%s, %s): %v", step, mode, who, err)
					}
					// The expiries follow the simulated clock; without them
					// the keys cannot expire in real time between steps.
					c.Persist(ctx, keys[who])
					replies = append(replies, dropTime(v))
					states = append(states, storedState(c, keys[who]))
				}
				if !reflect.DeepEqual(replies[0], replies[1]) || !reflect.DeepEqual(replies[0], replies[2]) {
					t.Fatalf("step %d (%s, cost %d): both versions %v, this version %v, the previous %v", step, mode, cost, replies[0], replies[1], replies[2])
				}
				if states[0] != states[1] || states[0] != states[2] {
					t.Fatalf("step %d (%s, cost %d): stored state: both versions %s, this version %s, the previous %s", step, mode, cost, states[0], states[1], states[2])
				}
				if states[0] != "none" {
					stored++
				}
			}
			if stored < 10 {
				t.Errorf("a state was stored after %d steps of 48; the sequence tests too little", stored)
			}
		})
	}
}

// dropTime returns a decision reply without its last value, the time it
// was decided at, which differs between calls; other replies as they are.
func dropTime(v any) any {
	if arr, ok := v.([]any); ok && len(arr) > 2 {
		return arr[:len(arr)-1]
	}
	return v
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
	srv := redistest.StartStandalone(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	if err := loadLibrary(ctx, c); err != nil {
		t.Fatal(err)
	}
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
