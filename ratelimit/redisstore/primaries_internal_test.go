package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
)

// TestSlotKeys: each slot's key hashes to that slot.
func TestSlotKeys(t *testing.T) {
	for slot, k := range slotKeys() {
		if got := keySlot(strconv.FormatUint(uint64(k), 10)); int(got) != slot {
			t.Fatalf("slotKeys()[%d] = %d, whose slot is %d", slot, k, got)
		}
	}
}

// BenchmarkReadPrimaries is the cost of reading the set of primaries from
// a slot map of 3 primaries (done at most once per primariesEvery, when the
// breaker's domains are read).
func BenchmarkReadPrimaries(b *testing.B) {
	c := redistest.StartCluster(b, 3)
	s := NewRedisStore(NewRedisClient(RedisClientOptions{Addrs: c.Addrs(), DialTimeout: time.Second}), RedisOptions{})
	b.Cleanup(func() { _ = s.Close() })
	if s.Primary(context.Background(), "k") == "" {
		b.Fatal("no slot map")
	}
	cc := s.cluster
	slotKeys()
	b.ReportAllocs()
	for b.Loop() {
		s.prim.Store(nil)
		if p := s.readPrimaries(cc); len(p.addrs) != 3 {
			b.Fatalf("primaries %v, want 3", p.addrs)
		}
	}
}
