package rls

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// key returns the store key of rule r for a descriptor's entries:
//
//	<prefix>:rls:{<tag>}:<id>:<algorithm>
//
// tag is a hash of the domain and the first entry, so the descriptors of a
// request that start with the same entry (typically the caller) share a
// Redis hash slot and are decided atomically together. id is a hash of the
// domain, the rule's path and every entry, so each distinct value of a key
// written without a value gets a counter of its own. Both are 64-bit
// prefixes of SHA-256: no client value appears in a key. values, when not
// nil, replaces the entries' values (share_threshold patterns).
func (e *Engine) key(domain string, r *Rule, entries []Entry, values []string) string {
	value := func(i int) string {
		if values != nil {
			return values[i]
		}
		return entries[i].Value
	}
	var buf [8]byte
	h := sha256.New()
	field := func(s string) {
		binary.BigEndian.PutUint64(buf[:], uint64(len(s)))
		h.Write(buf[:])
		h.Write([]byte(s))
	}
	field(domain)
	field(entries[0].Key)
	field(value(0))
	var sum [sha256.Size]byte
	tag := hex.EncodeToString(h.Sum(sum[:0])[:8])
	h.Reset()
	field(domain)
	field(r.Path)
	for i := range entries {
		field(entries[i].Key)
		field(value(i))
	}
	id := hex.EncodeToString(h.Sum(sum[:0])[:8])
	return e.opts.KeyPrefix + ":rls:{" + tag + "}:" + id + ":" + r.code
}
