package redisstore

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
)

// TestShortReplyIsTheFullOnesHead: for every algorithm, the same
// decisions sent in turn with the full reply (mode d) and the short one
// (mode c), on two sets of keys at the same times, of one and two items,
// admitted and denied: each short reply is the full reply cut after the
// decision time, and the two sets hold the same state after every step.
// Full and short calls alternate, so that a short call's cut is undone
// by the next full call of the library's reused reply table.
func TestShortReplyIsTheFullOnesHead(t *testing.T) {
	ctx := context.Background()
	c := libraryClient(t)
	prefix := redistest.KeyPrefix(t)
	limits := map[string]struct {
		alg   ratelimit.Algorithm
		limit ratelimit.Limit
	}{
		"token_bucket":   {ratelimit.TokenBucket, ratelimit.Limit{Rate: 2, Per: time.Second, Burst: 3}},
		"fixed_window":   {ratelimit.FixedWindow, ratelimit.Limit{Rate: 3, Per: time.Second}},
		"sliding_window": {ratelimit.SlidingWindow, ratelimit.Limit{Rate: 3, Per: time.Second}},
		"sliding_log":    {ratelimit.SlidingLog, ratelimit.Limit{Rate: 3, Per: time.Second}},
		"concurrency":    {ratelimit.Concurrency, ratelimit.Limit{Max: 2, Per: 2 * time.Second}},
	}
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for name, l := range limits {
		key := func(set, role string) string { return fmt.Sprintf("%s{short:%s}:%s:%s", prefix, name, set, role) }
		denied := 0
		for step := range 12 {
			n := 1 + step%2
			var replies [2][]any
			for k, mode := range []string{modeDecide, modeDecideShort} {
				items := make([]ratelimit.Item, n)
				for i := range items {
					items[i] = ratelimit.Item{Key: key(mode, fmt.Sprint(i)), Algorithm: l.alg, Limit: l.limit, Cost: 1, Holder: fmt.Sprint("h", step)}
				}
				call := &scriptCall{}
				call.build(mode, now, true, items, []int{0, 1}[:n], nil)
				v, err := c.Do(ctx, call.cmd(ctx, true).Args()...).Slice()
				if err != nil {
					t.Fatalf("%s step %d mode %s: %v", name, step, mode, err)
				}
				replies[k] = v
			}
			full, short := replies[0], replies[1]
			if len(full) != 2+(resultValues+refundValues)*n || !reflect.DeepEqual(short, full[:2+resultValues*n]) {
				t.Fatalf("%s step %d: full reply %v, short %v", name, step, full, short)
			}
			if full[0] == int64(0) {
				denied++
			}
			for i := range n {
				d, s := storedState(c, key(modeDecide, fmt.Sprint(i))), storedState(c, key(modeDecideShort, fmt.Sprint(i)))
				if d != s {
					t.Fatalf("%s step %d: key %d holds %s after full replies, %s after short ones", name, step, i, d, s)
				}
			}
			now += 100_000
		}
		if denied == 0 {
			t.Errorf("%s: no step denied; the sequence tests too little", name)
		}
	}
}
