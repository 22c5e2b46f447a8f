package redisstore

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/quotagate/quotagate/ratelimit"
)

// TestKeySlot checks keySlot against slots Redis Cluster computes
// (CLUSTER KEYSLOT), hash tags included: a wrong slot would group items of
// different slots into one renewal call, which the Cluster refuses.
func TestKeySlot(t *testing.T) {
	for _, c := range []struct {
		key  string
		want uint16
	}{
		{"123456789", 12739}, // CRC16/XMODEM check value 0x31C3
		{"foo", 12182},
		{"somekey", 11058},
		{"foo{hash_tag}", 2515},
		{"hash_tag", 2515},
		{"{user1000}.following", 3443},
		{"{user1000}.followers", 3443},
		{"", 0},
	} {
		if got := keySlot(c.key); got != c.want {
			t.Errorf("keySlot(%q) = %d, want %d", c.key, got, c.want)
		}
	}
	// An empty tag hashes the whole key; only the first tag counts.
	for _, c := range []struct{ key, same string }{
		{"foo{}{bar}", "foo{}{bar}"},
		{"foo{{bar}}zap", "{bar"},
		{"foo{bar}{zap}", "bar"},
	} {
		if keySlot(c.key) != keySlot(c.same) || hashTag(c.key) != c.same {
			t.Errorf("keySlot(%q) = %d (tag %q), want the slot of %q, %d", c.key, keySlot(c.key), hashTag(c.key), c.same, keySlot(c.same))
		}
	}
}

// TestRenewalOfRejectsMalformed: a renewal reply other than one flag of 0,
// 1 or 2 per item is ErrUnavailable and reports nothing, whatever a store
// or a proxy in front of it sends.
func TestRenewalOfRejectsMalformed(t *testing.T) {
	idx := []int{4, 7, 9}
	var r ratelimit.Renewal
	if err := renewalOf([]any{int64(1), int64(0), int64(2)}, idx, &r); err != nil ||
		!slices.Equal(r.Lost, []int{7}) || !slices.Equal(r.Retaken, []int{9}) {
		t.Fatalf("well-formed reply: %+v, %v; want lost [7], retaken [9]", r, err)
	}
	for name, v := range map[string]any{
		"nil":          nil,
		"not an array": "OK",
		"count":        []any{int64(3)}, // the reply of a store before per-item flags
		"short":        []any{int64(1), int64(0)},
		"long":         []any{int64(1), int64(0), int64(2), int64(1)},
		"flag 3":       []any{int64(1), int64(0), int64(3)},
		"flag -1":      []any{int64(0), int64(-1), int64(1)},
		"string flag":  []any{int64(0), "1", int64(1)},
		"nil flag":     []any{int64(0), nil, int64(1)},
	} {
		var r ratelimit.Renewal
		if err := renewalOf(v, idx, &r); !errors.Is(err, ratelimit.ErrUnavailable) || r.Lost != nil || r.Retaken != nil {
			t.Errorf("%s: %+v, %v; want ratelimit.ErrUnavailable and nothing reported", name, r, err)
		}
	}
}

// TestUnexpectedRepliesNotPrinted: an unexpected reply is described by
// its shape in the error, never printed whole (its size is the server's
// to choose).
func TestUnexpectedRepliesNotPrinted(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	many := make([]any, 100_000)
	for i := range many {
		many[i] = big[:64]
	}
	var r ratelimit.Renewal
	for _, v := range []any{big, many, []any{big}} {
		err := renewalOf(v, []int{0}, &r)
		if err == nil {
			t.Errorf("renewal reply %s: no error", replyShape(v))
		} else if len(err.Error()) > 200 {
			t.Errorf("renewal reply %s: error of %d bytes, want a short one", replyShape(v), len(err.Error()))
		}
	}
	if got := replyShape(int64(-3)); got != "-3" {
		t.Errorf("replyShape(-3) = %q", got)
	}
}
