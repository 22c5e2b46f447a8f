package ratelimit

import (
	"context"
	"errors"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
)

func TestParseReplyRejectsMalformed(t *testing.T) {
	items := []Item{{Key: "{a}k", Algorithm: TokenBucket, Limit: Limit{Rate: 1, Per: time.Second, Burst: 5}, Cost: 1}}
	idx := []int{0}
	good := []any{int64(1), int64(1), int64(4), int64(0), int64(1_000_000), int64(5), int64(0), int64(1)}
	if g, err := parseReply(good, items, idx); err != nil || !g.admitted || g.results[0].Remaining != 4 || g.before[0].Remaining != 5 {
		t.Fatalf("well-formed reply: %+v, %v", g, err)
	}
	bad := map[string]any{
		"not an array":   "OK",
		"nil":            nil,
		"short":          []any{int64(1), int64(1)},
		"long":           append(append([]any{}, good...), int64(0)),
		"string value":   []any{int64(1), "1", int64(4), int64(0), int64(1), int64(5), int64(0), int64(1)},
		"admitted=2":     []any{int64(2), int64(1), int64(4), int64(0), int64(1), int64(5), int64(0), int64(1)},
		"remaining>cap":  []any{int64(1), int64(1), int64(6), int64(0), int64(1), int64(5), int64(0), int64(1)},
		"negative retry": []any{int64(1), int64(1), int64(4), int64(-1), int64(1), int64(5), int64(0), int64(1)},
		"allowed=3":      []any{int64(1), int64(3), int64(4), int64(0), int64(1), int64(5), int64(0), int64(1)},
		"taken>cap":      []any{int64(1), int64(1), int64(4), int64(0), int64(1), int64(5), int64(0), int64(6)},
		"negative taken": []any{int64(1), int64(1), int64(4), int64(0), int64(1), int64(5), int64(0), int64(-1)},
	}
	for name, v := range bad {
		if _, err := parseReply(v, items, idx); !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: err = %v, want ErrUnavailable", name, err)
		}
	}
}

func TestHashTagGroups(t *testing.T) {
	items := []Item{{Key: "{route}x"}, {Key: "{acme}a"}, {Key: "plain"}, {Key: "{route}y"}, {Key: "{}e"}, {Key: "{acme}b"}, {Key: "plain"}}
	groups := groupItems(items)
	want := [][]int{{0, 3}, {1, 5}, {2, 6}, {4}}
	if len(groups) != len(want) {
		t.Fatalf("groups %+v", groups)
	}
	for g := range want {
		if len(groups[g].idx) != len(want[g]) {
			t.Fatalf("group %d = %v, want %v", g, groups[g].idx, want[g])
		}
		for i := range want[g] {
			if groups[g].idx[i] != want[g][i] {
				t.Fatalf("group %d = %v, want %v", g, groups[g].idx, want[g])
			}
		}
	}
	for _, key := range []string{"a{b}c", "{}x", "x{", "{ab", "a{b}{c}", "plain"} {
		if hashTag(key) != redistest.HashTag(key) {
			t.Errorf("hashTag(%q) = %q, harness says %q", key, hashTag(key), redistest.HashTag(key))
		}
	}
}

// TestLuaMulDiv checks the scripts' exact floor(a×b/c) against big.Int on
// a real Redis, including products far beyond 2^53.
func TestLuaMulDiv(t *testing.T) {
	srv := redistest.StartStandalone(t)
	prelude, err := luaFiles.ReadFile("lua/prelude.lua")
	if err != nil {
		t.Fatal(err)
	}
	script := redis.NewScript(string(prelude) + `
local out = {}
for i = 1, #ARGV, 3 do
  local q = muldiv(tonumber(ARGV[i]), tonumber(ARGV[i+1]), tonumber(ARGV[i+2]))
  if q == nil then q = -1 end
  out[#out + 1] = q
end
return out`)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	const maxExactF = int64(1) << 53
	rng := rand.New(rand.NewPCG(1, 2))
	var args []any
	var want []int64
	edge := []int64{0, 1, 2, 999_999, 1_000_000, 3_600_000_000, maxExactF - 1, maxExactF / 3, 1 << 40}
	for range 2000 {
		pick := func() int64 {
			if rng.IntN(3) == 0 {
				return edge[rng.IntN(len(edge))]
			}
			return rng.Int64N(maxExactF)
		}
		a, b, cc := pick(), pick(), pick()
		if cc == 0 {
			cc = 1
		}
		q := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
		q.Quo(q, big.NewInt(cc))
		w := int64(-1)
		if q.Cmp(big.NewInt(maxExactF)) < 0 {
			w = q.Int64()
		}
		args = append(args, a, b, cc)
		want = append(want, w)
	}
	got, err := script.Run(context.Background(), c, nil, args...).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("muldiv(%v, %v, %v) = %d, want %d", args[3*i], args[3*i+1], args[3*i+2], got[i], want[i])
		}
	}
}
