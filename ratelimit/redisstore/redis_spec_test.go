package redisstore

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
)

// TestLibraryRejectsSpecsGoNeverSends: an item spec (lua/items.lua) that
// the Go side never builds is refused with an error naming the item and
// the field, and the call changes nothing; it is never decided on. Each
// case is the second item of a decision whose first item is valid, sent
// as a direct FCALL; the spec's fields are
// alg,rate,per,burst,cost,shadow,want,cs,ce,cn.
func TestLibraryRejectsSpecsGoNeverSends(t *testing.T) {
	ctx := context.Background()
	c := libraryClient(t)
	prefix := redistest.KeyPrefix(t)
	keys := []string{prefix + "{spec}:a", prefix + "{spec}:b"}
	const valid = "1,10,1000000,10,1,0,0,0,0,0" // a token bucket
	const cal = "2,10,1000000,0,1,0,0,1000,2000,3000"
	for _, tc := range []struct{ spec, mode, err string }{
		{"9,10,1000000,10,1,0,0,0,0,0", "d", "alg names no algorithm: 9"},
		{"x,10,1000000,10,1,0,0,0,0,0", "d", "alg must be a non-negative integer"},
		{"10000000000000001,10,1000000,10,1,0,0,0,0,0", "d", "alg must be below 2^53"},
		{"1,0,1000000,10,1,0,0,0,0,0", "d", "rate must be a positive integer"},
		{"5,0,1000000,0,1,0,0,0,0,0", "d", "rate must be a positive integer"}, // concurrency: max
		{"1,9007199254740993,1,10,1,0,0,0,0,0", "d", "rate must be below 2^53"},
		{"1,10,0,10,1,0,0,0,0,0", "d", "per must be a positive integer (0 only for a calendar window)"},
		{"2,10,0,0,1,0,0,0,0,0", "e", "per must be a positive integer (0 only for a calendar window)"},
		{"1,10,10000000000000000000000,10,1,0,0,0,0,0", "d", "per must be below 2^53"},
		{"1,10,-1,10,1,0,0,0,0,0", "d", "per must be a non-negative integer"},
		{"1,10,1000000,0,1,0,0,0,0,0", "d", "burst must be a positive integer"},
		{"3,10,1000000,0,1,0,0,0,0,0", "d", "burst must be a positive integer"}, // sliding window: buckets
		{"1,10,1000000,12345678901234567,1,0,0,0,0,0", "d", "burst must be below 2^53"},
		{"1,10,1000000,10,-1,0,0,0,0,0", "d", "cost must not be negative outside a settlement"},
		{"1,10,1000000,10,-1,0,0,0,0,0", "r", "cost must not be negative outside a settlement"},
		{"1,10,1000000,10,1.5,0,0,0,0,0", "d", "cost must be an integer"},
		{"1,10,1000000,10,-9007199254740992,0,0,0,0,0", "d", "cost must be below 2^53"},
		{"1,10,1000000,10,1,2,0,0,0,0", "d", "shadow must be 0 or 1"},
		{"1,10,1000000,10,1,,0,0,0,0", "d", "shadow must be 0 or 1"},
		{"1,10,1000000,10,1,0,-4,0,0,0", "d", "want must be a non-negative integer"},
		{"1,10,1000000,10,1,0,99999999999999999,0,0,0", "d", "want must be below 2^53"},
		{"2,10,1000000,0,1,0,0,5,0,0", "d", "cs and cn must be 0 when ce is 0"},
		{"2,10,1000000,0,1,0,0,0,0,5", "d", "cs and cn must be 0 when ce is 0"},
		{"2,10,1000000,0,1,0,0,9007199254740992,2000,3000", "d", "cs must be below 2^53"},
		{"2,10,1000000,0,1,0,0,2000,1000,3000", "d", "ce must lie between cs and cn"},
		{"2,10,1000000,0,1,0,0,1000,3000,3000", "d", "ce must lie between cs and cn"},
		{"2,10,1000000,0,1,0,0,1000,9007199254740993,3000", "d", "ce must be below 2^53"},
		{"2,10,1000000,0,1,0,0,1000,2000,9007199254740992", "d", "cn must be below 2^53"},
		{"2,10,1000000,0,1,0,0,1000,2000,3e3", "d", "cn must be a non-negative integer"},
		{"1,10,1000000,10,1,0,0,0,0", "d", "spec must be ten comma-separated integers alg,rate,per,burst,cost,shadow,want,cs,ce,cn, got 9"},
		{"1,10,1000000,10,1,0,0,0,0,0,0", "d", "spec must be ten comma-separated integers alg,rate,per,burst,cost,shadow,want,cs,ce,cn, got 11"},
	} {
		err := c.FCall(ctx, libraryName, keys, tc.mode, "", valid, tc.spec).Err()
		want := "ERR quotagate: item 2: " + tc.err
		if err == nil || err.Error() != want {
			t.Errorf("%s (mode %s): got %v, want %q", tc.spec, tc.mode, err, want)
		}
		if n := c.Exists(ctx, keys...).Val(); n != 0 {
			t.Fatalf("%s: a refused call left %d keys", tc.spec, n)
		}
	}
	// What the Go side does send passes: the largest exact values, a
	// settlement's negative delta at a reservation time, a calendar.
	for _, tc := range []struct{ mode, spec string }{
		{"d", "1,10,1000000,10,1,0,9007199254740991,0,0,0"},
		{"d", "1,10,00000000000000001000000,10,1,0,0,0,0,0"}, // leading zeros read exactly
		{"d", cal},
		{"d", "2,10,0,0,1,0,0,1000,2000,3000"}, // a calendar window has no per
		{"d", "4,3,1000000,0,1,1,0,0,0,0"},
		{"e", "5,2,2000000,0,0,0,0,0,0,0"},
	} {
		if err := c.FCall(ctx, libraryName, keys, tc.mode, "", valid, tc.spec).Err(); err != nil {
			t.Errorf("%s %s: %v", tc.mode, tc.spec, err)
		}
	}
	marker := prefix + "{spec}:settled"
	if err := c.FCall(ctx, libraryName, append(keys, marker), "s", "", valid, "1,10,1000000,10,-3,0,1775000000000000,0,0,0", 60000).Err(); err != nil {
		t.Errorf("settlement: %v", err)
	}
	if err := c.FCall(ctx, libraryName, keys, "d", "", valid, strings.Replace(valid, ",1,0,0", ",-1,0,0", 1)).Err(); err == nil {
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
