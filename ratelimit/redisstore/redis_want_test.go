package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
)

// cachedProbe, appended to the library's body, registers
// cached_after(KEYS, ARGV): it runs the decision decide(KEYS, ARGV) and
// replies the number of texts in the table of parsed items after it,
// and the units the first item took (of one item, the reply's 10th
// value; see lua/dispatch.lua).
const cachedProbe = `redis.register_function{function_name = 'cached_after', callback = function(KEYS, ARGV)
  local r = decide(KEYS, ARGV)
  if r.err then return r end
  return {items_cached, r[10]}
end}
`

// TestReservationsOfOnePolicyShareItsSpec: reservations of one policy
// that want different amounts (a caller varying max_tokens) are one
// parsed item in the library's table, not one per amount, so that they
// neither miss the table on every call nor push out the texts that
// repeat; each still takes what it wants.
func TestReservationsOfOnePolicyShareItsSpec(t *testing.T) {
	ctx := context.Background()
	c := probeClient(t, cachedProbe)
	items := []ratelimit.Item{{Key: redistest.KeyPrefix(t) + "{want}:bucket", Algorithm: ratelimit.TokenBucket,
		Limit: ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 100}, Cost: 1}}
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	var first int64
	for k, want := range []int64{2, 7, 3, 11, 5} {
		call := &scriptCall{}
		call.build(modeDecide, now, true, items, []int{0}, []int64{want})
		v, err := c.FCall(ctx, "cached_after", call.keys, call.argv()...).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		if v[1] != want {
			t.Errorf("reservation of %d took %d", want, v[1])
		}
		if k == 0 {
			first = v[0]
		} else if v[0] != first {
			t.Fatalf("after %d reservations of one policy wanting %d amounts, the table holds %d texts, %d after the first", k+1, k+1, v[0], first)
		}
	}
}
