package redisstore

import (
	"context"
	"testing"

	"github.com/quotagate/quotagate/internal/redistest"
)

// heldProbe, appended to the library's body, registers held_probe(KEYS,
// ARGV): it parses the specs ARGV[1] and ARGV[2] as items 1 and 2 of a
// call, makes each a holder's item (held_by) once, then 100 times more
// with the holders ARGV[3] and ARGV[4] with the garbage collector stopped,
// and replies the bytes the Lua heap grew by in those 100 rounds, then
// per item its lim's holder and per, and whether the two are one table.
const heldProbe = `redis.register_function{function_name = 'held_probe', callback = function(KEYS, ARGV)
  local a, b = item_of(ARGV[1], true, 1), item_of(ARGV[2], true, 2)
  held_by(a, 'warm', 1); held_by(b, 'warm', 2)
  collectgarbage('stop')
  local before = collectgarbage('count')
  local h1, h2
  for k = 1, 100 do h1 = held_by(a, ARGV[3], 1); h2 = held_by(b, ARGV[4], 2) end
  local grew = (collectgarbage('count') - before) * 1024
  collectgarbage('restart')
  return {grew, h1.lim.holder, h1.lim.per, h2.lim.holder, h2.lim.per, h1 == h2 and 1 or 0}
end}
`

// TestHeldItemsAllocateNothing: naming the holder of a concurrency item
// allocates nothing once a position of the call has been used (the
// library keeps its tables from call to call), and the items of one call
// stay apart: two positions of one spec hold their own holders, and a
// position reused for another spec takes that spec's limit. Through real
// calls, one release of two holders of one spec on one key releases both.
func TestHeldItemsAllocateNothing(t *testing.T) {
	ctx := context.Background()
	c := probeClient(t, heldProbe)
	const slots, other = "5,2,2000000,0,1,0,0,0,0", "5,3,7000000,0,1,0,0,0,0"
	for _, tc := range []struct {
		a, b    string
		perB    int64
		explain string
	}{
		{slots, slots, 2000000, "one spec at two positions"},
		{slots, other, 7000000, "the second position now of another spec"},
		{slots, slots, 2000000, "and back"},
	} {
		v, err := c.FCall(ctx, "held_probe", nil, tc.a, tc.b, "h1", "h2").Slice()
		if err != nil {
			t.Fatal(err)
		}
		if v[0] != int64(0) {
			t.Errorf("%s: 200 holder items grew the Lua heap by %v bytes, want 0", tc.explain, v[0])
		}
		if v[1] != "h1" || v[2] != int64(2000000) || v[3] != "h2" || v[4] != tc.perB || v[5] != int64(0) {
			t.Errorf("%s: items (holder, per, same table) %v, want h1 2000000, h2 %d, 0", tc.explain, v[1:], tc.perB)
		}
	}

	key := redistest.KeyPrefix(t) + "{held}:slots"
	for _, h := range []string{"h1", "h2"} {
		if v, err := c.FCall(ctx, libraryName, []string{key}, "d", "", slots, h).Slice(); err != nil || v[0] != int64(1) {
			t.Fatalf("acquiring %s: %v, %v", h, v, err)
		}
	}
	if err := c.FCall(ctx, libraryName, []string{key, key}, "r", "", slots, slots, "h1", "h2").Err(); err != nil {
		t.Fatal(err)
	}
	if left := c.ZRange(ctx, key, 0, -1).Val(); len(left) != 0 {
		t.Errorf("one release of h1 and h2 left slots %v", left)
	}
}
