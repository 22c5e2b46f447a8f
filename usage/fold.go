package usage

import (
	"unicode"
	"unicode/utf8"
)

// strictKeys makes s treat as ambiguous (no value at the path) an input
// that JSON decoders may read different values at the path from: one
// whose object on the path repeats a path key (decoders keep the first,
// the last, or fail), or holds a key equal to a path key only under
// Unicode case folding (Go's encoding/json matches a struct field so,
// most others do not).
func (s *scanner) strictKeys() { s.strict = true }

// keyFold compares a key, byte by decoded byte, with a path key under
// Unicode simple case folding, as Go's encoding/json matches field names.
type keyFold struct {
	ok   bool // the key so far equals a prefix of the path key, folded
	pos  int  // bytes of the path key matched
	part [utf8.UTFMax]byte
	n    int // bytes of a rune not yet complete in part
}

// byte adds the next decoded byte of the key.
func (f *keyFold) byte(c byte, seg string) {
	f.part[f.n] = c
	f.n++
	if !utf8.FullRune(f.part[:f.n]) {
		return
	}
	r, size := utf8.DecodeRune(f.part[:f.n])
	whole := size == f.n
	f.n = 0
	if !whole || f.pos >= len(seg) {
		f.ok = false
		return
	}
	sr, sn := utf8.DecodeRuneInString(seg[f.pos:])
	if r == utf8.RuneError || !equalFold(r, sr) {
		f.ok = false
		return
	}
	f.pos += sn
}

// matched reports whether the whole key equals seg under folding.
func (f *keyFold) matched(seg string) bool { return f.ok && f.n == 0 && f.pos == len(seg) }

// equalFold reports whether a and b are in one Unicode simple case
// folding orbit (k, K and the Kelvin sign are).
func equalFold(a, b rune) bool {
	if a == b {
		return true
	}
	for r := unicode.SimpleFold(a); r != a; r = unicode.SimpleFold(r) {
		if r == b {
			return true
		}
	}
	return false
}
