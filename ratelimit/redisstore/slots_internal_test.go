package redisstore

import "testing"

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
