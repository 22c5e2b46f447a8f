package ratelimit

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The scripts are one file per algorithm plus a shared prelude and the
// entry point, concatenated into a single script so that one call can decide
// keys of different algorithms atomically.
//
//go:embed lua/*.lua
var luaFiles embed.FS

var luaOrder = []string{
	"lua/prelude.lua",
	"lua/tokenbucket.lua",
	"lua/fixedwindow.lua",
	"lua/slidingwindow.lua",
	"lua/slidinglog.lua",
	"lua/dispatch.lua",
}

// decideScript is the assembled script. Run sends EVALSHA and, when the
// server does not know the digest (after a restart or SCRIPT FLUSH), EVAL
// with the source, which also caches it again.
var decideScript = redis.NewScript(assembleScript())

func assembleScript() string {
	var src []byte
	for _, name := range luaOrder {
		b, err := luaFiles.ReadFile(name)
		if err != nil {
			// The files are embedded at build time; a missing one is a
			// build defect that every test would reveal.
			panic("ratelimit: embedded script missing: " + name)
		}
		src = append(src, "-- "+name+"\n"...)
		src = append(src, b...)
		src = append(src, '\n')
	}
	return string(src)
}

// Script modes (ARGV[1]).
const (
	modeDecide = "d"
	modeRefund = "r"
	modeEval   = "e" // evaluate without consuming anything
)

// argsPerItem is the number of ARGV values that describe one item.
const argsPerItem = 7

// valuesPerResult is the number of integers the script returns per item:
// allowed, remaining, retry (µs), reset (µs), remaining and reset as they
// were before this call consumed anything, and the units taken.
const valuesPerResult = 7

// scriptArgs builds KEYS and ARGV for the items of one group. want, when
// not nil, holds per batch item the units to reserve (see DecideReserve);
// 0 means the item's cost.
func scriptArgs(mode string, nowUS int64, useNow bool, items []Item, idx []int, want []int64) ([]string, []any) {
	keys := make([]string, len(idx))
	args := make([]any, 0, 2+argsPerItem*len(idx))
	now := ""
	if useNow {
		now = strconv.FormatInt(nowUS, 10)
	}
	args = append(args, mode, now)
	for i, j := range idx {
		it := items[j]
		keys[i] = it.Key
		shadow := 0
		if it.Shadow {
			shadow = 1
		}
		var w int64
		if want != nil {
			w = want[j]
		}
		args = append(args, int(it.Algorithm), it.Limit.Rate, it.Limit.Per.Microseconds(), it.Limit.Burst, it.Cost, shadow, w)
	}
	return keys, args
}

// groupReply is a decoded reply of a decide or evaluate call.
type groupReply struct {
	admitted bool
	results  []Result
	// before holds Remaining and ResetAfter as they were before the call
	// consumed anything, to report after a refund.
	before []Result
	// taken holds the units each item consumed (0 unless admitted).
	taken []int64
}

// parseReply checks the shape of a decide or evaluate reply for n items and
// decodes it. Any surprise is an error wrapping ErrUnavailable.
func parseReply(v any, items []Item, idx []int) (groupReply, error) {
	arr, ok := v.([]any)
	if !ok {
		return groupReply{}, fmt.Errorf("%w: script replied %T, want an array", ErrUnavailable, v)
	}
	if want := 1 + valuesPerResult*len(idx); len(arr) != want {
		return groupReply{}, fmt.Errorf("%w: script replied %d values, want %d", ErrUnavailable, len(arr), want)
	}
	ints := make([]int64, len(arr))
	for i, e := range arr {
		n, ok := e.(int64)
		if !ok {
			return groupReply{}, fmt.Errorf("%w: script reply value %d is %T, want an integer", ErrUnavailable, i, e)
		}
		ints[i] = n
	}
	if ints[0] != 0 && ints[0] != 1 {
		return groupReply{}, fmt.Errorf("%w: script replied admitted=%d", ErrUnavailable, ints[0])
	}
	g := groupReply{admitted: ints[0] == 1, results: make([]Result, len(idx)), before: make([]Result, len(idx)), taken: make([]int64, len(idx))}
	for i, j := range idx {
		it := items[j]
		capacity := Capacity(it.Algorithm, it.Limit)
		v := ints[1+valuesPerResult*i:]
		allowed, remaining, retry, reset, remaining0, reset0, taken := v[0], v[1], v[2], v[3], v[4], v[5], v[6]
		if allowed != 0 && allowed != 1 ||
			remaining < 0 || remaining > capacity || remaining0 < 0 || remaining0 > capacity ||
			retry < 0 || reset < 0 || reset0 < 0 || taken < 0 || taken > capacity {
			return groupReply{}, fmt.Errorf("%w: script reply for item %d out of range: %v", ErrUnavailable, j, v[:valuesPerResult])
		}
		g.results[i] = Result{
			Allowed:    allowed == 1,
			Limit:      capacity,
			Remaining:  remaining,
			RetryAfter: micros(retry),
			ResetAfter: micros(reset),
		}
		g.before[i] = g.results[i]
		g.before[i].Remaining = remaining0
		g.before[i].ResetAfter = micros(reset0)
		g.taken[i] = taken
	}
	return g, nil
}

// unavailable wraps a client or server error in ErrUnavailable, keeping it
// in the chain (so that context.DeadlineExceeded stays visible).
func unavailable(op string, err error) error {
	if errors.Is(err, ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
}

// withDeadline adds ctx's error to err when ctx is done or its deadline has
// passed (a socket timeout set from the deadline can fire a hair before
// the context's own timer), so that callers can test for
// context.DeadlineExceeded.
func withDeadline(ctx context.Context, err error) error {
	cerr := ctx.Err()
	if cerr == nil {
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
			cerr = context.DeadlineExceeded
		}
	}
	if cerr == nil || errors.Is(err, cerr) {
		return err
	}
	return fmt.Errorf("%w: %w", cerr, err)
}

// withTimeout applies d to ctx; d <= 0 leaves ctx as it is.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}
