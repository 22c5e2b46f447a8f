package redisstore

import (
	"github.com/quotagate/quotagate/ratelimit"
	"math"

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

// luaOrder lists the files that define the prelude and the algorithms, in
// the order they are concatenated; luaEntry, the entry point, follows them
// as the body of a function decide(KEYS, ARGV).
var luaOrder = []string{
	"lua/prelude.lua",
	"lua/tokenbucket.lua",
	"lua/fixedwindow.lua",
	"lua/slidingwindow.lua",
	"lua/slidinglog.lua",
	"lua/concurrency.lua",
	"lua/items.lua",
	"lua/state.lua",
	"lua/bucketalone.lua",
}

const luaEntry = "lua/dispatch.lua"

// decideScript is the assembled script, for servers that cannot run the
// function library (see runner): the shared body and a call of its entry
// point. Run sends EVALSHA and, when the server does not know the digest
// (after a restart or SCRIPT FLUSH), EVAL with the source, which also
// caches it again.
// Before Redis 5 a script that reads TIME and then writes must ask to be
// replicated by its effects; functions always are.
var decideScript = redis.NewScript(assembleBody() +
	"if redis.replicate_commands then redis.replicate_commands() end\nreturn decide(KEYS, ARGV)\n")

// assembleBody returns the source that the script and the function library
// share: the prelude and algorithms, then the local function
// decide(KEYS, ARGV) whose body is the entry point.
func assembleBody() string {
	var src []byte
	for _, name := range append(luaOrder, luaEntry) {
		b := luaFile(name)
		src = append(src, "-- "+name+"\n"...)
		if name == luaEntry {
			src = append(src, "local function decide(KEYS, ARGV)\n"...)
		}
		src = append(src, b...)
		if name == luaEntry {
			src = append(src, "\nend"...)
		}
		src = append(src, '\n')
	}
	return string(src)
}

// luaFile returns the embedded file name.
func luaFile(name string) string {
	b, err := luaFiles.ReadFile(name)
	if err != nil {
		// The files are embedded at build time; a missing one is a build
		// defect that every test would reveal.
		panic("ratelimit: embedded script missing: " + name)
	}
	return string(b)
}

// Script modes (ARGV[1]).
const (
	modeDecide = "d"
	// modeDecideShort decides with the short reply, which ends at the
	// decision time: for a group that will never be refunded (the last of
	// its batch) and reserves nothing.
	modeDecideShort = "c"
	modeRefund      = "r"
	modeEval        = "e" // evaluate without consuming anything
	modeRenew       = "w" // renew concurrency slots
	modeSettle      = "s"
)

// The reply of decide and evaluate (see lua/dispatch.lua): admitted, then
// resultValues integers per item (allowed, remaining, retry (µs), reset
// (µs), and the key's debt, see ratelimit.Result.Debt), then the time the
// script decided at (µs); then, but in the short reply, refundValues per
// item (remaining and reset as they were before this call consumed
// anything, and the units taken).
const (
	resultValues = 5
	refundValues = 3
)

// decideSHA is the digest EVALSHA names, boxed once.
var decideSHA any = decideScript.Hash()

// build sets the call's EVALSHA arguments for the items of one group:
// KEYS, then ARGV = mode, now ("" for the server clock), each item's spec
// (see specFields), each item's want when one of the group's is not 0
// (the mode then in its form with wants, see withWants), and, when an
// item names a Holder (and mode is not settle), each item's holder. want,
// when not nil, holds per batch item the units to reserve (see
// DecideReserve; 0 means the item's cost), or to settle the
// reservation's time (µs; 0 unknown). The want is an argument of its own,
// not part of the spec, so that the spec of one policy is the same text
// whatever a request reserves, and the library parses it once.
//
// A reused call keeps its previous command's spec texts and boxed values
// where they are unchanged (typically the limits of the same policies), so
// that it rebuilds a command without formatting or allocating them.
func (c *scriptCall) build(mode string, nowUS int64, useNow bool, items []ratelimit.Item, idx []int, want []int64) {
	n := len(idx)
	holders := false
	if mode != modeSettle {
		for _, j := range idx {
			if items[j].Holder != "" {
				holders = true
				break
			}
		}
	}
	wants := 0 // the wants' arguments
	if wm, ok := withWants(mode); ok && want != nil {
		for _, j := range idx {
			if want[j] != 0 {
				mode, wants = wm, n
				break
			}
		}
	}
	size := 5 + 2*n + wants
	if holders {
		size += n
	}
	if cap(c.args) < size {
		c.args = append(make([]any, 0, size), c.args...)
	}
	c.args = c.args[:size]
	c.keys = resize(c.keys, n)
	c.args[0], c.args[1] = "evalsha", decideSHA
	c.setInt(2, n)
	for i, j := range idx {
		c.keys[i] = items[j].Key
		c.setString(3+i, items[j].Key)
	}
	c.setString(3+n, mode)
	calNow := nowUS
	calRead := useNow
	if useNow {
		c.args[4+n] = strconv.FormatInt(nowUS, 10)
	} else {
		c.args[4+n] = ""
	}
	for i, j := range idx {
		it := items[j]
		f := specFields{algorithm: int64(it.Algorithm), rate: rateArg(it), per: it.Limit.Per.Microseconds(),
			burst: burstArg(it), cost: it.Cost}
		if it.Shadow {
			f.shadow = 1
		}
		if wants > 0 {
			c.setInt64(5+2*n+i, want[j])
		}
		if cal := it.Limit.Calendar; cal.Set() {
			if !calRead {
				calNow, calRead = time.Now().UnixMicro(), true
			}
			f.cs, f.ce, f.cn = calendarArgs(cal, calNow)
		}
		c.args[5+n+i] = c.specText(i, f)
		if holders {
			c.setString(5+2*n+wants+i, it.Holder)
		}
	}
}

// withWants is the mode that carries wants for mode (decide, evaluate,
// settle), and whether there is one.
func withWants(mode string) (string, bool) {
	switch mode {
	case modeDecide:
		return "D", true
	case modeEval:
		return "E", true
	case modeSettle:
		return "S", true
	}
	return mode, false
}

// specFields are the values of one item's spec, in the order of its text.
type specFields struct {
	algorithm, rate, per, burst, cost, shadow, cs, ce, cn int64
}

// specMax is the longest spec text: nine signed 64-bit integers in
// decimal and eight commas.
const specMax = 9*20 + 8

// appendText appends the spec of an item as the script reads it
// (lua/items.lua): the values in decimal, separated by commas.
func (f specFields) appendText(b []byte) []byte {
	for k, v := range [...]int64{f.algorithm, f.rate, f.per, f.burst, f.cost, f.shadow, f.cs, f.ce, f.cn} {
		if k > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, v, 10)
	}
	return b
}

// rateArg is the script's rate argument of it: the rate, or for
// concurrency the most slots held at once.
func rateArg(it ratelimit.Item) int64 {
	if it.Algorithm == ratelimit.Concurrency {
		return it.Limit.Max
	}
	return it.Limit.Rate
}

// buildSettle sets the call's arguments to settle the items idx, whose
// Cost holds the signed delta, reserved at the times at (µs, per item of
// items, as their wants; 0 unknown), under the marker key with a time to
// live of ttl: the arguments of build with the marker as the last key and
// the marker's time to live (ms) as the last argument.
func (c *scriptCall) buildSettle(nowUS int64, useNow bool, items []ratelimit.Item, at []int64, idx []int, marker string, ttl time.Duration) {
	c.build(modeSettle, nowUS, useNow, items, idx, at)
	n := len(idx)
	c.args = append(c.args, nil, nil)
	copy(c.args[4+n:], c.args[3+n:len(c.args)-2])
	c.args[3+n] = marker
	c.keys = append(c.keys, marker)
	c.args[2] = n + 1
	c.args[len(c.args)-1] = ttl.Milliseconds()
}

// burstArg is the script's burst argument of it: the burst, or for a
// sliding window (whose burst is 0) its number of buckets.
func burstArg(it ratelimit.Item) int64 {
	if it.Algorithm == ratelimit.SlidingWindow {
		return it.Limit.SlidingBuckets()
	}
	return it.Limit.Burst
}

// calendarArgs returns what the script needs to find a calendar window by
// its own clock: the start and end of the window holding nowUS (the
// gateway's clock, or the injected one) and the end of the next window. The
// script takes the next window when its clock is already past end, so that
// the store's clock decides near a boundary, as it does for every other
// limit; a store clock behind the gateway's by d starts the window d early.
func calendarArgs(c ratelimit.Calendar, nowUS int64) (start, end, next int64) {
	start, end = c.Bounds(nowUS)
	_, next = c.Bounds(end)
	return start, end, next
}

// specText returns the spec text of f, the i-th item of the call, boxed:
// the one the call made for its i-th item before when f is the same (a
// reused call usually decides the same policies again), else a new one,
// kept for the next build.
func (c *scriptCall) specText(i int, f specFields) any {
	if i < len(c.specs) && c.specs[i].text != nil && c.specs[i].f == f {
		return c.specs[i].text
	}
	var buf [specMax]byte
	m := specMemo{f: f, text: string(f.appendText(buf[:0]))}
	if i < len(c.specs) {
		c.specs[i] = m
	} else if i == len(c.specs) {
		c.specs = append(c.specs, m)
	}
	return m.text
}

// specMemo is a spec's fields and its text, boxed (see specText).
type specMemo struct {
	f    specFields
	text any
}

// setInt, setInt64 and setString set argument p to v, keeping the boxed
// value already there when it is equal.
func (c *scriptCall) setInt(p int, v int) {
	if old, ok := c.args[p].(int); !ok || old != v {
		c.args[p] = v
	}
}

func (c *scriptCall) setInt64(p int, v int64) {
	if old, ok := c.args[p].(int64); !ok || old != v {
		c.args[p] = v
	}
}

func (c *scriptCall) setString(p int, v string) {
	if old, ok := c.args[p].(string); !ok || old != v {
		c.args[p] = v
	}
}

// argv returns the call's ARGV (the arguments after its keys).
func (c *scriptCall) argv() []any { return c.args[3+len(c.keys):] }

// resize returns s with length n, reusing its array when it is large
// enough. The contents are unspecified.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// itemReply is what a decide or evaluate reply says of one item beyond its
// Result: the Result as it was before the call consumed anything (to
// report after a refund), and the units the item took (0 unless admitted).
type itemReply struct {
	before ratelimit.Result
	taken  int64
}

// replyShape describes a reply the store did not expect, for an error:
// an integer as itself, an array by its length, anything else by its
// type. It never prints a string or an array's elements, whose size is
// the server's to choose.
func replyShape(v any) string {
	switch v := v.(type) {
	case int64:
		return strconv.FormatInt(v, 10)
	case []any:
		return strconv.Itoa(len(v)) + " values"
	}
	return fmt.Sprintf("%T", v)
}

// parseReply checks the shape of a decide or evaluate reply for the items
// idx (indexes into items) and decodes it: the item j's Result goes to
// res[j] and, unless short (the reply of modeDecideShort), the rest to
// ext[j]; a short reply writes no ext. It reports whether the group
// admitted. Any surprise, a reply of the other length among them, is an
// error wrapping ErrUnavailable, and then nothing is written.
func parseReply(v any, items []ratelimit.Item, idx []int, res []ratelimit.Result, ext []itemReply, short bool) (bool, error) {
	arr, ok := v.([]any)
	if !ok {
		return false, fmt.Errorf("%w: script replied %T, want an array", ratelimit.ErrUnavailable, v)
	}
	n := len(idx)
	want := 2 + resultValues*n
	if !short {
		want += refundValues * n
	}
	if len(arr) != want {
		return false, fmt.Errorf("%w: script replied %d values, want %d", ratelimit.ErrUnavailable, len(arr), want)
	}
	for i, e := range arr {
		if _, ok := e.(int64); !ok {
			return false, fmt.Errorf("%w: script reply value %d is %T, want an integer", ratelimit.ErrUnavailable, i, e)
		}
	}
	at := func(i int) int64 { return arr[i].(int64) }
	admitted, decidedAt := at(0), at(1+resultValues*n)
	if admitted != 0 && admitted != 1 {
		return false, fmt.Errorf("%w: script replied admitted=%d", ratelimit.ErrUnavailable, admitted)
	}
	if decidedAt <= 0 {
		return false, fmt.Errorf("%w: script replied a decision time of %d µs", ratelimit.ErrUnavailable, decidedAt)
	}
	for i, j := range idx {
		capacity := ratelimit.Capacity(items[j].Algorithm, items[j].Limit)
		o := 1 + resultValues*i
		allowed, remaining, retry, reset, debt := at(o), at(o+1), at(o+2), at(o+3), at(o+4)
		if allowed != 0 && allowed != 1 || debt < 0 || remaining < 0 || remaining > capacity || retry < 0 || reset < 0 {
			return false, fmt.Errorf("%w: script reply for item %d out of range: %v", ratelimit.ErrUnavailable, j, arr[o:o+resultValues])
		}
		if short {
			continue
		}
		e := 2 + resultValues*n + refundValues*i
		remaining0, reset0, taken := at(e), at(e+1), at(e+2)
		if remaining0 < 0 || remaining0 > capacity || reset0 < 0 || taken < 0 || taken > capacity {
			return false, fmt.Errorf("%w: script reply for item %d out of range: %v", ratelimit.ErrUnavailable, j, arr[e:e+refundValues])
		}
	}
	for i, j := range idx {
		o := 1 + resultValues*i
		r := ratelimit.Result{
			Allowed:    at(o) == 1,
			Limit:      ratelimit.Capacity(items[j].Algorithm, items[j].Limit),
			Remaining:  at(o + 1),
			RetryAfter: micros(at(o + 2)),
			ResetAfter: micros(at(o + 3)),
			Debt:       at(o + 4),
			DecidedAt:  decidedAt,
		}
		res[j] = r
		if short {
			continue
		}
		e := 2 + resultValues*n + refundValues*i
		r.Remaining, r.ResetAfter = at(e), micros(at(e+1))
		ext[j] = itemReply{before: r, taken: at(e + 2)}
	}
	return admitted == 1, nil
}

// bound is what a batch's script calls run under: the caller's ctx, whose
// end abandons them, and their deadline, the earlier of ctx's and a
// timeout from the start. It stands for a context derived with
// context.WithTimeout without deriving one.
type bound struct {
	ctx context.Context
	at  time.Time // the deadline; zero when there is none
	// own is set when at comes from the timeout (it is earlier than ctx's
	// deadline), so that a timer must watch it; otherwise ctx ends at at.
	own bool
}

// newBound applies timeout to ctx; timeout <= 0 leaves ctx's deadline.
func newBound(ctx context.Context, timeout time.Duration) bound {
	b := bound{ctx: ctx}
	dl, ok := ctx.Deadline()
	if ok {
		b.at = dl
	}
	if timeout > 0 {
		if t := time.Now().Add(timeout); !ok || t.Before(dl) {
			b.at, b.own = t, true
		}
	}
	return b
}

// err is ctx's error, or context.DeadlineExceeded once the deadline has
// passed, or nil.
func (b bound) err() error {
	if err := b.ctx.Err(); err != nil {
		return err
	}
	if !b.at.IsZero() && !time.Now().Before(b.at) {
		return context.DeadlineExceeded
	}
	return nil
}

// withDeadline adds b's error to err when b's ctx is done or its deadline
// has passed (a socket timeout set from the deadline can fire a hair
// before a timer would), so that callers can test for
// context.DeadlineExceeded.
func withDeadline(b bound, err error) error {
	cerr := b.err()
	if cerr == nil || errors.Is(err, cerr) {
		return err
	}
	return fmt.Errorf("%w: %w", cerr, err)
}

// micros converts a number of microseconds to a Duration, saturating
// instead of overflowing.
func micros(us int64) time.Duration {
	if us > math.MaxInt64/int64(time.Microsecond) {
		return math.MaxInt64
	}
	return time.Duration(us) * time.Microsecond
}
