package redisstore

import (
	"github.com/quotagate/quotagate/ratelimit"

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
	items := []ratelimit.Item{{Key: "{a}k", Algorithm: ratelimit.TokenBucket, Limit: ratelimit.Limit{Rate: 1, Per: time.Second, Burst: 5}, Cost: 1}}
	idx := []int{0}
	const at = int64(1_700_000_000_000_000)
	// reply is a full one-item reply: admitted, allowed, remaining, retry,
	// reset, debt, the time, remaining and reset before, taken.
	reply := func(v ...int64) []any {
		r := make([]any, len(v))
		for i, x := range v {
			r[i] = x
		}
		return r
	}
	good := reply(1, 1, 4, 0, 1_000_000, 0, at, 5, 0, 1)
	res, ext := make([]ratelimit.Result, 1), make([]itemReply, 1)
	if ok, err := parseReply(good, items, idx, res, ext, false); err != nil || !ok || res[0].Remaining != 4 || res[0].ResetAfter != time.Second ||
		ext[0].before.Remaining != 5 || ext[0].before.ResetAfter != 0 || ext[0].taken != 1 ||
		res[0].DecidedAt != at || ext[0].before.DecidedAt != at {
		t.Fatalf("well-formed reply: %v %+v %+v, %v", ok, res, ext, err)
	}
	res, ext = make([]ratelimit.Result, 1), make([]itemReply, 1)
	if ok, err := parseReply(good[:7], items, idx, res, ext, true); err != nil || !ok || res[0].Remaining != 4 || res[0].DecidedAt != at || ext[0] != (itemReply{}) {
		t.Fatalf("well-formed short reply: %v %+v %+v, %v", ok, res, ext, err)
	}
	bad := map[string]struct {
		v     any
		short bool
	}{
		"not an array":    {"OK", false},
		"nil":             {nil, false},
		"short":           {reply(1, 1), false},
		"long":            {append(append([]any{}, good...), int64(0)), false},
		"full for short":  {good, true},
		"short for full":  {good[:7], false},
		"string value":    {append(reply(1), "1", int64(4), int64(0), int64(1), int64(0), at, int64(5), int64(0), int64(1)), false},
		"admitted=2":      {reply(2, 1, 4, 0, 1, 0, at, 5, 0, 1), false},
		"remaining>cap":   {reply(1, 1, 6, 0, 1, 0, at, 5, 0, 1), false},
		"negative retry":  {reply(1, 1, 4, -1, 1, 0, at, 5, 0, 1), false},
		"allowed=3":       {reply(1, 3, 4, 0, 1, 0, at, 5, 0, 1), false},
		"taken>cap":       {reply(1, 1, 4, 0, 1, 0, at, 5, 0, 6), false},
		"negative debt":   {reply(1, 1, 4, 0, 1, -1, at, 5, 0, 1), false},
		"no time":         {reply(1, 1, 4, 0, 1, 0, 0, 5, 0, 1), false},
		"negative taken":  {reply(1, 1, 4, 0, 1, 0, at, 5, 0, -1), false},
		"before>cap":      {reply(1, 1, 4, 0, 1, 0, at, 6, 0, 1), false},
		"short, no time":  {reply(1, 1, 4, 0, 1, 0, 0), true},
		"short, allowed2": {reply(1, 2, 4, 0, 1, 0, at), true},
	}
	for name, c := range bad {
		res, ext := make([]ratelimit.Result, 1), make([]itemReply, 1)
		if _, err := parseReply(c.v, items, idx, res, ext, c.short); !errors.Is(err, ratelimit.ErrUnavailable) {
			t.Errorf("%s: err = %v, want ratelimit.ErrUnavailable", name, err)
		}
		if res[0] != (ratelimit.Result{}) || ext[0] != (itemReply{}) {
			t.Errorf("%s: a rejected reply wrote %+v %+v", name, res[0], ext[0])
		}
	}
}

func TestHashTagGroups(t *testing.T) {
	items := []ratelimit.Item{{Key: "{route}x"}, {Key: "{acme}a"}, {Key: "plain"}, {Key: "{route}y"}, {Key: "{}e"}, {Key: "{acme}b"}, {Key: "plain"}}
	idx := make([]int, len(items))
	groups := groupItems(items, make([]group, len(items)), idx)
	want := [][]int{{0, 3}, {1, 5}, {2, 6}, {4}}
	if len(groups) != len(want) {
		t.Fatalf("groups %+v", groups)
	}
	for g := range want {
		got := idx[groups[g].lo:groups[g].hi]
		if len(got) != len(want[g]) {
			t.Fatalf("group %d = %v, want %v", g, got, want[g])
		}
		for i := range want[g] {
			if got[i] != want[g][i] {
				t.Fatalf("group %d = %v, want %v", g, got, want[g])
			}
		}
	}
	for _, key := range []string{"a{b}c", "{}x", "x{", "{ab", "a{b}{c}", "plain"} {
		if hashTag(key) != redistest.HashTag(key) {
			t.Errorf("hashTag(%q) = %q, harness says %q", key, hashTag(key), redistest.HashTag(key))
		}
	}
}

// preludeScript returns body after the library's prelude as a script,
// and a client of a redis-server of its own, started for t; both end
// with t.
func preludeScript(t *testing.T, body string) (*redis.Script, *redis.Client) {
	t.Helper()
	srv := redistest.StartStandalone(t)
	prelude, err := luaFiles.ReadFile("lua/prelude.lua")
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return redis.NewScript(string(prelude) + body), c
}

// TestLuaMulDiv checks the scripts' exact floor(a×b/c) against big.Int on
// a real Redis, including products far beyond 2^53.
func TestLuaMulDiv(t *testing.T) {
	script, c := preludeScript(t, `
local out = {}
for i = 1, #ARGV, 3 do
  local q = muldiv(tonumber(ARGV[i]), tonumber(ARGV[i+1]), tonumber(ARGV[i+2]))
  if q == nil then q = -1 end
  out[#out + 1] = q
end
return out`)
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

// TestLuaDivisions checks the scripts' fdiv and cdiv, which divide with
// the % operator, against big.Int on a real Redis, over the whole range
// the scripts use: dividends up to 2^53 in magnitude (cdiv takes negative
// ones), divisors from 1 to 2^53 - 1.
func TestLuaDivisions(t *testing.T) {
	script, c := preludeScript(t, `
local out = {}
for i = 1, #ARGV, 2 do
  local a, b = tonumber(ARGV[i]), tonumber(ARGV[i+1])
  local f = -1
  if a >= 0 then f = fdiv(a, b) end
  out[#out + 1] = f
  out[#out + 1] = cdiv(a, b)
end
return out`)
	const maxExactF = int64(1) << 53
	rng := rand.New(rand.NewPCG(3, 4))
	edge := []int64{0, 1, 2, 3, 7, 999, 1000, 1_000_000, 3_600_000_000, maxExactF - 1, maxExactF, maxExactF / 3, maxExactF/3 + 1, 1 << 40}
	pick := func() int64 {
		switch rng.IntN(4) {
		case 0:
			return edge[rng.IntN(len(edge))]
		case 1:
			return rng.Int64N(1 << 20)
		}
		return rng.Int64N(maxExactF + 1)
	}
	var args []any
	var want []int64
	for range 4000 {
		a, b := pick(), pick()
		if b == 0 || b == maxExactF {
			b = 1
		}
		if rng.IntN(4) == 0 {
			a = -a
		}
		f := int64(-1)
		if a >= 0 {
			f = a / b
		}
		q, m := new(big.Int).DivMod(big.NewInt(a), big.NewInt(b), new(big.Int)) // Euclidean: floor for b > 0
		if m.Sign() != 0 {
			q.Add(q, big.NewInt(1))
		}
		args = append(args, a, b)
		want = append(want, f, q.Int64())
	}
	got, err := script.Run(context.Background(), c, nil, args...).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			op := "fdiv"
			if i%2 == 1 {
				op = "cdiv"
			}
			t.Errorf("%s(%v, %v) = %d, want %d", op, args[i/2*2], args[i/2*2+1], got[i], want[i])
		}
	}
}

// TestSettlementSpecsNotKept: the texts of settlements, each new (a
// request's own delta), do not fill the table of parsed items
// that a decision's repeating text is kept in. The calls run in one
// script, which keeps the table from call to call as the library does.
func TestSettlementSpecsNotKept(t *testing.T) {
	srv := redistest.StartStandalone(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	script := redis.NewScript(assembleBody() + `
local before = items_cached
for i = 1, 3 do
  local r = decide({KEYS[1], KEYS[2]}, {'S', '1000000', '1,10,1000000,10,-' .. i .. ',0,0,0,0', i .. '000000', '60000'})
  if type(r) ~= 'table' then return r end
end
for i = 1, 2 do decide({KEYS[1]}, {'d', '1000000', '1,10,1000000,10,1,0,0,0,0'}) end
return items_cached - before`)
	prefix := redistest.KeyPrefix(t)
	got, err := script.Run(context.Background(), c, []string{prefix + "{k}b", prefix + "{k}m"}).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if got != 1 {
		t.Errorf("three settlements and two decisions of one text kept %d texts, want 1 (the decision's)", got)
	}
}

// TestScriptCallReuse: a call rebuilt for other items (other values, other
// shapes) sends exactly the arguments a fresh call would, of the same
// types; a spec text it keeps is never sent for an item whose spec
// differs in any one field.
func TestScriptCallReuse(t *testing.T) {
	with := func(it ratelimit.Item, f func(*ratelimit.Item)) ratelimit.Item { f(&it); return it }
	a := ratelimit.Item{Key: "{t1}a", Algorithm: ratelimit.TokenBucket, Limit: ratelimit.Limit{Rate: 1_000_000, Per: time.Second, Burst: 1_000_000}, Cost: 1}
	b := ratelimit.Item{Key: "{t2}b", Algorithm: ratelimit.SlidingLog, Limit: ratelimit.Limit{Rate: 300, Per: time.Minute}, Cost: 2, Shadow: true}
	batches := []struct {
		mode  string
		items []ratelimit.Item
		want  []int64
		now   bool
	}{
		{modeDecide, []ratelimit.Item{a, a}, nil, false},
		{modeDecide, []ratelimit.Item{a, b}, nil, false},
		{modeRefund, []ratelimit.Item{b}, nil, true},
		{modeDecide, []ratelimit.Item{a, a, b}, []int64{500, 0, 0}, false},
		{modeEval, []ratelimit.Item{a, b}, nil, false},
		// The kept spec texts: each of these differs from the one before
		// it at the same position in one field of its spec only.
		{modeDecideShort, []ratelimit.Item{a, b}, nil, false},
		{modeDecideShort, []ratelimit.Item{with(a, func(it *ratelimit.Item) { it.Cost = 3 }), b}, nil, false},
		{modeDecideShort, []ratelimit.Item{with(a, func(it *ratelimit.Item) { it.Cost = 3; it.Limit.Rate = 7 }), b}, nil, false},
		{modeDecideShort, []ratelimit.Item{with(a, func(it *ratelimit.Item) { it.Cost = 3; it.Limit.Rate = 7; it.Limit.Per = time.Hour }), b}, nil, false},
		{modeDecideShort, []ratelimit.Item{with(a, func(it *ratelimit.Item) { it.Cost = 3; it.Limit.Rate = 7; it.Limit.Per = time.Hour; it.Limit.Burst = 9 }), b}, nil, false},
		{modeDecideShort, []ratelimit.Item{a, with(b, func(it *ratelimit.Item) { it.Shadow = false })}, nil, false},
		{modeDecideShort, []ratelimit.Item{a, with(b, func(it *ratelimit.Item) { it.Algorithm = ratelimit.FixedWindow })}, nil, false},
	}
	reused := &scriptCall{}
	for k, bt := range batches {
		idx := make([]int, len(bt.items))
		for i := range idx {
			idx[i] = i
		}
		fresh := &scriptCall{}
		fresh.build(bt.mode, 42, bt.now, bt.items, idx, bt.want)
		reused.build(bt.mode, 42, bt.now, bt.items, idx, bt.want)
		if len(reused.args) != len(fresh.args) || len(reused.keys) != len(fresh.keys) {
			t.Fatalf("batch %d: reused call has %d args, %d keys; fresh %d, %d", k, len(reused.args), len(reused.keys), len(fresh.args), len(fresh.keys))
		}
		for i := range fresh.args {
			if reused.args[i] != fresh.args[i] {
				t.Errorf("batch %d: arg %d = %#v, want %#v", k, i, reused.args[i], fresh.args[i])
			}
		}
		for i := range fresh.keys {
			if reused.keys[i] != fresh.keys[i] {
				t.Errorf("batch %d: key %d = %q, want %q", k, i, reused.keys[i], fresh.keys[i])
			}
		}
	}
	// The layout the script reads: name, digest, numkeys, keys, mode, now,
	// one spec per item, then the wants when one is not 0 (mode in
	// capitals), then the holders when an item names one.
	conc := ratelimit.Item{Key: "{t1}c", Algorithm: ratelimit.Concurrency, Limit: ratelimit.Limit{Max: 3, Per: time.Minute}, Cost: 1, Holder: "h1"}
	for _, c := range []struct {
		name  string
		mode  string
		items []ratelimit.Item
		want  []int64
		args  []any
	}{
		{"one bucket", modeDecide, []ratelimit.Item{a}, nil,
			[]any{"evalsha", decideScript.Hash(), 1, "{t1}a", "d", "", "1,1000000,1000000,1000000,1,0,0,0,0"}},
		{"shadow log, reserving bucket", modeEval, []ratelimit.Item{b, a}, []int64{0, 7},
			[]any{"evalsha", decideScript.Hash(), 2, "{t2}b", "{t1}a", "E", "", "4,300,60000000,0,2,1,0,0,0", "1,1000000,1000000,1000000,1,0,0,0,0", int64(0), int64(7)}},
		{"no want above 0", modeDecide, []ratelimit.Item{a}, []int64{0},
			[]any{"evalsha", decideScript.Hash(), 1, "{t1}a", "d", "", "1,1000000,1000000,1000000,1,0,0,0,0"}},
		{"holders", modeDecide, []ratelimit.Item{a, conc}, nil,
			[]any{"evalsha", decideScript.Hash(), 2, "{t1}a", "{t1}c", "d", "", "1,1000000,1000000,1000000,1,0,0,0,0", "5,3,60000000,0,1,0,0,0,0", "", "h1"}},
		{"reservation and holders", modeDecide, []ratelimit.Item{a, conc}, []int64{5, 0},
			[]any{"evalsha", decideScript.Hash(), 2, "{t1}a", "{t1}c", "D", "", "1,1000000,1000000,1000000,1,0,0,0,0", "5,3,60000000,0,1,0,0,0,0", int64(5), int64(0), "", "h1"}},
	} {
		call := &scriptCall{}
		idx := make([]int, len(c.items))
		for i := range idx {
			idx[i] = i
		}
		call.build(c.mode, 0, false, c.items, idx, c.want)
		if len(call.args) != len(c.args) {
			t.Fatalf("%s: args %#v, want %#v", c.name, call.args, c.args)
		}
		for i := range c.args {
			if call.args[i] != c.args[i] {
				t.Errorf("%s: arg %d = %#v, want %#v", c.name, i, call.args[i], c.args[i])
			}
		}
	}
}

// TestBound: the deadline is the earlier of ctx's and the timeout's, and a
// timer is needed only when the timeout's is earlier.
func TestBound(t *testing.T) {
	bg := context.Background()
	if b := newBound(bg, 0); !b.at.IsZero() || b.own || b.err() != nil {
		t.Fatalf("no deadline: %+v", b)
	}
	if b := newBound(bg, time.Hour); b.at.IsZero() || !b.own {
		t.Fatalf("timeout only: %+v", b)
	}
	near, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	dl, _ := near.Deadline()
	if b := newBound(near, time.Hour); !b.at.Equal(dl) || b.own {
		t.Fatalf("ctx earlier: %+v, want ctx's deadline %v", b, dl)
	}
	if b := newBound(near, time.Second); b.at.After(dl) || !b.own {
		t.Fatalf("timeout earlier: %+v", b)
	}
	past := bound{ctx: bg, at: time.Now().Add(-time.Millisecond), own: true}
	if !errors.Is(past.err(), context.DeadlineExceeded) {
		t.Fatalf("past deadline: err = %v", past.err())
	}
	if err := withDeadline(past, errors.New("i/o timeout")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("withDeadline = %v, want DeadlineExceeded in the chain", err)
	}
	done, stop := context.WithCancel(bg)
	stop()
	if b := newBound(done, time.Hour); !errors.Is(b.err(), context.Canceled) {
		t.Fatalf("cancelled ctx: err = %v", b.err())
	}
}

// TestSettleMarkerKey: the marker of a settlement lies in the slot of its
// group's hash tag, after the keys' prefix (which an ACL may require).
func TestSettleMarkerKey(t *testing.T) {
	for _, c := range []struct{ key, want string }{
		{"qg:{t:ab12}:tenant:tb", "qg:{t:ab12}:settled:id"},
		{"{acme}:x", "{acme}:settled:id"},
		{"plain", "{plain}:settled:id"},
		{"a{b", "{a{b}:settled:id"},
	} {
		tag := hashTag(c.key)
		got := markerKey(c.key, tag, "id")
		if got != c.want || hashTag(got) != tag {
			t.Errorf("markerKey(%q) = %q (tag %q), want %q in tag %q", c.key, got, hashTag(got), c.want, tag)
		}
	}
}
