package redisstore

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
)

// TestLibraryRejectsSpecsGoNeverSends: an item spec (lua/items.lua) or a
// want that the Go side never builds is refused with an error naming the
// item and the field, and the call changes nothing; it is never decided
// on. Each case is the second item of a decision whose first item is
// valid, sent as a direct FCALL; the spec's fields are
// alg,rate,per,burst,cost,shadow,cs,ce,cn, and a want, when the case has
// one, follows the specs (the mode in capitals).
func TestLibraryRejectsSpecsGoNeverSends(t *testing.T) {
	ctx := context.Background()
	c := libraryClient(t)
	prefix := redistest.KeyPrefix(t)
	keys := []string{prefix + "{spec}:a", prefix + "{spec}:b"}
	const valid = "1,10,1000000,10,1,0,0,0,0" // a token bucket
	// call is the FCALL of mode on valid and spec, with the wants "0" and
	// want when want is set.
	call := func(mode, spec, want string, more ...any) *redis.Cmd {
		args := []any{mode, "", valid, spec}
		if want != "" {
			args = append(args, "0", want)
		}
		return c.FCall(ctx, libraryName, keys, append(args, more...)...)
	}
	const fields = "spec must be nine comma-separated integers alg,rate,per,burst,cost,shadow,cs,ce,cn"
	for _, tc := range []struct{ spec, mode, want, err string }{
		{"9,10,1000000,10,1,0,0,0,0", "d", "", "alg names no algorithm: 9"},
		{"x,10,1000000,10,1,0,0,0,0", "d", "", "alg must be a non-negative integer"},
		{"10000000000000001,10,1000000,10,1,0,0,0,0", "d", "", "alg must be below 2^53"},
		{"1,0,1000000,10,1,0,0,0,0", "d", "", "rate must be a positive integer"},
		{"5,0,1000000,0,1,0,0,0,0", "d", "", "rate must be a positive integer"}, // concurrency: max
		{"1,9007199254740993,1,10,1,0,0,0,0", "d", "", "rate must be below 2^53"},
		{"1,10,0,10,1,0,0,0,0", "d", "", "per must be a positive integer (0 only for a calendar window)"},
		{"2,10,0,0,1,0,0,0,0", "e", "", "per must be a positive integer (0 only for a calendar window)"},
		{"1,10,10000000000000000000000,10,1,0,0,0,0", "d", "", "per must be below 2^53"},
		{"1,10,-1,10,1,0,0,0,0", "d", "", "per must be a non-negative integer"},
		{"1,10,1000000,0,1,0,0,0,0", "d", "", "burst must be a positive integer"},
		{"3,10,1000000,0,1,0,0,0,0", "d", "", "burst must be a positive integer"}, // sliding window: buckets
		{"1,10,1000000,12345678901234567,1,0,0,0,0", "d", "", "burst must be below 2^53"},
		{"1,10,1000000,10,-1,0,0,0,0", "d", "", "cost must not be negative outside a settlement"},
		{"1,10,1000000,10,-1,0,0,0,0", "r", "", "cost must not be negative outside a settlement"},
		{"1,10,1000000,10,1.5,0,0,0,0", "d", "", "cost must be an integer"},
		{"1,10,1000000,10,-9007199254740992,0,0,0,0", "d", "", "cost must be below 2^53"},
		{"1,10,1000000,10,1,2,0,0,0", "d", "", "shadow must be 0 or 1"},
		{"1,10,1000000,10,1,,0,0,0", "d", "", "shadow must be 0 or 1"},
		{"2,10,1000000,0,1,0,5,0,0", "d", "", "cs and cn must be 0 when ce is 0"},
		{"2,10,1000000,0,1,0,0,0,5", "d", "", "cs and cn must be 0 when ce is 0"},
		{"2,10,1000000,0,1,0,9007199254740992,2000,3000", "d", "", "cs must be below 2^53"},
		{"2,10,1000000,0,1,0,2000,1000,3000", "d", "", "ce must lie between cs and cn"},
		{"2,10,1000000,0,1,0,1000,3000,3000", "d", "", "ce must lie between cs and cn"},
		{"2,10,1000000,0,1,0,1000,9007199254740993,3000", "d", "", "ce must be below 2^53"},
		{"2,10,1000000,0,1,0,1000,2000,9007199254740992", "d", "", "cn must be below 2^53"},
		{"2,10,1000000,0,1,0,1000,2000,3e3", "d", "", "cn must be a non-negative integer"},
		{"1,10,1000000,10,1,0,0,0", "d", "", fields + ", got 8"},
		{"1,10,1000000,10,1,0,0,0,0,0", "d", "", fields + ", got 10"},
		{valid, "D", "-4", "want must be a non-negative integer"},
		{valid, "D", "4.0", "want must be a non-negative integer"},
		{valid, "E", "0x10", "want must be a non-negative integer"},
		{valid, "D", "99999999999999999", "want must be below 2^53"},
		{valid, "S", "9007199254740992", "want must be below 2^53"},
	} {
		var more []any
		if tc.mode == "S" {
			keys = append(keys, prefix+"{spec}:settled")
			more = append(more, 60000)
		}
		err := call(tc.mode, tc.spec, tc.want, more...).Err()
		keys = keys[:2]
		want := "ERR quotagate: item 2: " + tc.err
		if err == nil || err.Error() != want {
			t.Errorf("%s, want %q (mode %s): got %v, want %q", tc.spec, tc.want, tc.mode, err, want)
		}
		if n := c.Exists(ctx, keys...).Val(); n != 0 {
			t.Fatalf("%s: a refused call left %d keys", tc.spec, n)
		}
	}
	// A mode the Go side never sends is refused, and writes nothing.
	for _, mode := range []string{"x", "R", "W", "dd", ""} {
		err := c.FCall(ctx, libraryName, keys, mode, "", valid, valid).Err()
		want := fmt.Sprintf("ERR quotagate: mode must be one of c, d, e, r, s, w (D, E, S with wants), got %q", mode)
		if err == nil || err.Error() != want {
			t.Errorf("mode %q: got %v, want %q", mode, err, want)
		}
		if n := c.Exists(ctx, keys...).Val(); n != 0 {
			t.Fatalf("mode %q: a refused call left %d keys", mode, n)
		}
	}
	// A call with wants must carry one per item.
	if err := c.FCall(ctx, libraryName, keys, "D", "", valid, valid, "0").Err(); err == nil || err.Error() != "ERR quotagate: item 2: want must be a non-negative integer" {
		t.Errorf("a want missing: %v", err)
	}
	// What the Go side does send passes: the largest exact values, a
	// settlement's negative delta at a reservation time, a calendar.
	for _, tc := range []struct{ mode, spec, want string }{
		{"D", valid, "9007199254740991"},
		{"d", "1,10,00000000000000001000000,10,1,0,0,0,0", ""}, // leading zeros read exactly
		{"d", "2,10,1000000,0,1,0,1000,2000,3000", ""},
		{"d", "2,10,0,0,1,0,1000,2000,3000", ""}, // a calendar window has no per
		{"d", "4,3,1000000,0,1,1,0,0,0", ""},
		{"e", "5,2,2000000,0,0,0,0,0,0", ""},
	} {
		if err := call(tc.mode, tc.spec, tc.want).Err(); err != nil {
			t.Errorf("%s %s %s: %v", tc.mode, tc.spec, tc.want, err)
		}
	}
	marker := prefix + "{spec}:settled"
	if err := c.FCall(ctx, libraryName, append(keys, marker), "S", "", valid, "1,10,1000000,10,-3,0,0,0,0", "0", "1775000000000000", 60000).Err(); err != nil {
		t.Errorf("settlement: %v", err)
	}
	if err := call("d", strings.Replace(valid, ",1,0,0", ",-1,0,0", 1), "").Err(); err == nil {
		t.Errorf("a negative cost outside a settlement was decided on after a settlement parsed it")
	}
}

// libraryClient is a client of a redis-server of its own, started for t,
// on which this version's library is loaded; both end with t.
func libraryClient(t *testing.T) *redis.Client {
	t.Helper()
	srv := redistest.StartStandalone(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	if err := loadLibrary(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	return c
}

// probeClient is libraryClient with also a library of this version's body
// and probe, Lua that registers functions of its own (see heldProbe),
// which can reach the body's local functions and tables.
func probeClient(t *testing.T, probe string) *redis.Client {
	t.Helper()
	c := libraryClient(t)
	_, src := assembleLibrary(assembleBody() + probe)
	if err := c.FunctionLoad(context.Background(), src).Err(); err != nil {
		t.Fatal(err)
	}
	return c
}
