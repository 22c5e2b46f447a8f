package redisstore

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
)

// TestMergedCallRefusesBadCounts sends the script merged calls whose
// counts do not add up to their keys and arguments (see lua/merged.lua):
// each must fail whole with the script's error, before any of its
// decisions runs (the key a valid first decision would write stays
// absent), and a count up to 4000 is copied while 4001 is refused.
func TestMergedCallRefusesBadCounts(t *testing.T) {
	srv := redistest.Shared(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	ctx := context.Background()
	if err := decideScript.Load(ctx, c).Err(); err != nil {
		t.Fatal(err)
	}
	key := redistest.KeyPrefix(t) + "{m}k"
	// A valid decision: one token bucket of burst 5 taking 1.
	one := []any{1, 3, modeDecide, "1700000000000000", "1,10,10000000,5,1,0,0,0,0"}
	args := func(parts ...any) []any {
		var out []any
		for _, p := range parts {
			if s, ok := p.([]any); ok {
				out = append(out, s...)
			} else {
				out = append(out, p)
			}
		}
		return out
	}
	many := make([]any, 4001)
	for i := range many {
		many[i] = "x"
	}
	for _, tc := range []struct {
		name string
		keys []string
		args []any
		want string
	}{
		{"no decisions", []string{key}, args("m", 0), "count must be a positive integer"},
		{"count not a number", []string{key}, args("m", "one", one), "count must be a positive integer"},
		{"negative count", []string{key}, args("m", -1, one), "count must be a positive integer"},
		{"more decisions than sent", []string{key}, args("m", 2, one), "call 2 has bad key or argument counts"},
		{"a key short", nil, args("m", 1, one), "call 1 has bad key or argument counts"},
		{"an argument short", []string{key}, args("m", 1, one[:4]), "call 1 has bad key or argument counts"},
		{"an argument left over", []string{key}, args("m", 1, one, "x"), "keys or arguments left over"},
		{"a key left over", []string{key, key + "2"}, args("m", 1, one), "keys or arguments left over"},
		{"count not an integer", []string{key}, args("m", 1, "1.0", one[1:]), "call 1 has bad key or argument counts"},
		{"count above 4000", []string{key}, args("m", 2, one, 0, 4001, many), "call 2 has bad key or argument counts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys := tc.keys
			if keys == nil {
				keys = []string{}
			}
			v, err := decideScript.EvalSha(ctx, c, keys, tc.args...).Result()
			if err == nil || !strings.Contains(err.Error(), "merged call: "+tc.want) {
				t.Errorf("merged call = %v, %v; want the error %q", v, err, tc.want)
			}
			if n, err := c.Exists(ctx, key).Result(); err != nil || n != 0 {
				t.Errorf("a decision of the refused call ran: key exists %d, %v", n, err)
			}
		})
	}
	// 4000 arguments, the most a count may say, are copied: the decision
	// runs and fails on its spec alone, as its own reply.
	v, err := decideScript.EvalSha(ctx, c, []string{key}, args("m", 1, 1, 4000, many[:4000])...).Result()
	arr, _ := v.([]any)
	if err != nil || len(arr) != 2 || arr[0] != int64(-1) {
		t.Errorf("merged call of a decision of 4000 arguments = %v, %v; want the decision's own error", fmt.Sprint(v)[:min(100, len(fmt.Sprint(v)))], err)
	}
}
