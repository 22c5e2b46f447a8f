package redisstore

import (
	"context"
	"errors"
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

// TestCloseEndsPrunedQueue: a node's queue that prune dropped (its node no
// longer a primary) while a call waited in it is still ended by Close: the
// call returns errStoreClosed rather than waiting for its deadline. Close
// used to end only the queues the store still listed.
func TestCloseEndsPrunedQueue(t *testing.T) {
	c := redistest.StartCluster(t, 2)
	s := NewRedisStore(NewRedisClient(RedisClientOptions{Addrs: c.Addrs(), DialTimeout: time.Second}), RedisOptions{
		Coalesce: CoalesceOptions{Writers: 1}})
	if s.cluster == nil {
		t.Fatal("not a Cluster client")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	co := s.coalescerFor(bound{ctx: ctx, at: time.Now().Add(time.Hour)}, "k")
	s.prune(map[string]bool{})
	co.slots <- struct{}{} // the only writer slot is taken: the call stays queued
	call := s.calls.get(bound{ctx: ctx, at: time.Now().Add(time.Hour)})
	done := make(chan error, 1)
	go func() {
		_, err := co.do(call)
		done <- err
	}()
	_ = s.Close()
	select {
	case err := <-done:
		if !errors.Is(err, errStoreClosed) {
			t.Errorf("a call queued in a pruned queue, store closed: %v, want %v", err, errStoreClosed)
		}
	case <-time.After(10 * time.Second):
		// Not a timed assertion: the call's own deadline is an hour away.
		t.Fatal("a call queued in a pruned queue was not ended by Close within 10s")
	}
}

// BenchmarkPrimaries is the cost of Primaries with the set of primaries
// fresh (the breaker's AllOpen asks it on every Release and Renew of a
// concurrency slot). No server is reached: the set is set directly.
func BenchmarkPrimaries(b *testing.B) {
	s := NewRedisStore(NewRedisClient(RedisClientOptions{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}}), RedisOptions{})
	b.Cleanup(func() { _ = s.Close() })
	s.slotsKnown.Store(true)
	s.prim.Store(newPrimaries(map[string]bool{"a:1": true, "b:1": true, "c:1": true}, time.Now().Add(time.Hour)))
	b.ReportAllocs()
	for b.Loop() {
		if len(s.Primaries()) != 3 {
			b.Fatal("want 3 primaries")
		}
	}
}
