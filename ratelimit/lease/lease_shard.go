package lease

import (
	"hash/maphash"
	"math/bits"
	"runtime"
	"sync"
	"time"
)

// leaseShard holds the blocks and demand estimates of the keys that hash
// to it. Decisions of keys in different shards take different locks, so
// a gateway on many cores does not serialize its leased decisions on one
// mutex; the keys of one shard share its lock only for map look-ups (a
// block has a lock of its own).
type leaseShard struct {
	mu     sync.Mutex
	blocks map[string]*block
	// auto is the demand estimate of the Auto keys of the shard seen
	// lately (see lease_auto.go).
	auto map[string]*autoRate
	// heat estimates the demand of the shard's Auto keys that are not in
	// auto (see lease_heat.go); nil until the shard sees its first one.
	heat *heatSketch
	// Padding keeps two shards' locks off one cache line.
	_ [64 - 8 - 3*8]byte
}

// leaseShards is the number of shards of a Store: four per
// GOMAXPROCS at its creation, rounded up to a power of two, within
// [8, 256]. More shards than cores make two decisions of different keys
// unlikely to meet on one lock.
func leaseShards() int {
	n := min(max(4*runtime.GOMAXPROCS(0), 8), 256)
	return 1 << bits.Len(uint(n-1))
}

// shard returns the shard of key.
func (s *Store) shard(key string) *leaseShard { return s.shardOf(s.hash(key)) }

// hash is the store's seeded hash of key: its low bits choose the shard,
// all of them the key's cells in the shard's heat sketch.
func (s *Store) hash(key string) uint64 { return maphash.String(s.seed, key) }

// shardOf returns the shard of the key whose hash is h.
func (s *Store) shardOf(h uint64) *leaseShard { return &s.shards[h&s.mask] }

// autoPruneDue reports whether the auto tables are due a prune at now (the
// last one was at least every ago), and if so records now as the time of
// the prune its caller makes.
func (s *Store) autoPruneDue(now time.Time, every time.Duration) bool {
	s.pruneMu.Lock()
	defer s.pruneMu.Unlock()
	if now.Sub(s.autoPruned) < every {
		return false
	}
	s.autoPruned = now
	return true
}
