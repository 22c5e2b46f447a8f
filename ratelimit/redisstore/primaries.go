package redisstore

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// primariesEvery is how long IsPrimary trusts the set of primaries it read
// from the client's slot map, unless a lookup meets a primary the set
// lacks (a replica promoted by a failover), which makes it read it again.
const primariesEvery = time.Second

// primaries is a Cluster's set of primaries, as the client's slot map had
// it when read: as a set (addrs) and as a list (list, the same addresses
// in no order, shared by every caller of Primaries).
type primaries struct {
	addrs map[string]bool
	list  []string
	at    time.Time
}

// newPrimaries returns the primaries addrs, read at at.
func newPrimaries(addrs map[string]bool, at time.Time) *primaries {
	list := make([]string, 0, len(addrs))
	for addr := range addrs {
		list = append(list, addr)
	}
	return &primaries{addrs: addrs, list: list, at: at}
}

// IsPrimary reports whether addr owns a slot in the Cluster client's slot
// map, read without a round trip (at most once per primariesEvery, or
// again as soon as a lookup met a primary it did not list). It is true
// when the client is not a Cluster client, or has no slot map yet (there
// is nothing to compare with). Reading the map also forgets the queue and
// function mode of each node that is no longer a primary; a call in
// flight there ends as it would have.
func (s *RedisStore) IsPrimary(addr string) bool {
	cc, ok := s.client.(*redis.ClusterClient)
	if !ok || !s.slotsKnown.Load() {
		return true
	}
	p := s.currentPrimaries(cc)
	if p == nil {
		return true
	}
	return p.addrs[addr]
}

// Primaries returns the addresses of the primaries in the Cluster client's
// slot map, read as IsPrimary reads it, in no order; nil when the client
// is not a Cluster client or has no slot map yet. The slice is shared
// until the next read of the slot map: the caller must not modify it. It
// does not allocate, as the breaker asks it on every Release and Renew.
func (s *RedisStore) Primaries() []string {
	cc, ok := s.client.(*redis.ClusterClient)
	if !ok || !s.slotsKnown.Load() {
		return nil
	}
	p := s.currentPrimaries(cc)
	if p == nil {
		return nil
	}
	return p.list
}

// currentPrimaries returns the set of primaries last read, read again
// first when it is older than primariesEvery (nil if none could be read).
func (s *RedisStore) currentPrimaries(cc *redis.ClusterClient) *primaries {
	p := s.prim.Load()
	if p == nil || time.Since(p.at) >= primariesEvery {
		p = s.readPrimaries(cc)
	}
	return p
}

// notePrimary makes the next IsPrimary read the slot map again when addr,
// just found to own a key, is not in the set of primaries last read.
func (s *RedisStore) notePrimary(addr string) {
	if p := s.prim.Load(); p != nil && !p.addrs[addr] {
		s.prim.CompareAndSwap(p, &primaries{addrs: p.addrs, list: p.list})
	}
}

// readPrimaries reads the owner of every slot from cc's slot map, stores
// the set and prunes the per-node state of the nodes left out. It returns
// the set last stored (nil if none) when the map cannot be read, and also,
// without waiting, while another caller reads it.
func (s *RedisStore) readPrimaries(cc *redis.ClusterClient) *primaries {
	if !s.primMu.TryLock() {
		// Another caller reads the map (some ms: a lookup per slot); one
		// that has a set goes on with it rather than wait, as the breaker
		// asks on every Release and Renew.
		if p := s.prim.Load(); p != nil {
			return p
		}
		s.primMu.Lock()
	}
	defer s.primMu.Unlock()
	if p := s.prim.Load(); p != nil && time.Since(p.at) < primariesEvery {
		return p // read by another caller meanwhile
	}
	addrs := map[string]bool{}
	for _, k := range slotKeys() {
		node, err := cc.MasterForKey(context.Background(), strconv.FormatUint(uint64(k), 10))
		if err != nil {
			return s.prim.Load()
		}
		addrs[node.Options().Addr] = true
	}
	p := newPrimaries(addrs, time.Now())
	s.prim.Store(p)
	s.prune(addrs)
	return p
}

// prune forgets the queue and function mode of every node not in live.
// A queue is dropped, not closed: its callers write their own calls (see
// coalescer), so those queued still go out; the store's Close still ends
// it, as it shares the store's nodeQuit.
func (s *RedisStore) prune(live map[string]bool) {
	s.nodeMu.Lock()
	for addr := range s.nodeCo {
		if !live[addr] {
			delete(s.nodeCo, addr)
		}
	}
	s.nodeMu.Unlock()
	s.run.nodes.Range(func(k, _ any) bool {
		if !live[k.(string)] {
			s.run.nodes.Delete(k)
		}
		return true
	})
}

// slotKeys returns, for each hash slot, a number whose decimal text is a
// key of that slot.
var slotKeys = sync.OnceValue(func() []uint32 {
	keys := make([]uint32, clusterSlots)
	seen := make([]bool, clusterSlots)
	for i, left := uint32(0), clusterSlots; left > 0; i++ {
		if sl := keySlot(strconv.FormatUint(uint64(i), 10)); !seen[sl] {
			seen[sl], keys[sl] = true, i
			left--
		}
	}
	return keys
})
