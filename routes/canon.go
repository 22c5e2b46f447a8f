package routes

import (
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// A request segment is compared with literals in its canonical form, the
// form every spelling an upstream might fold together shares. Matching on
// it means a request is charged under the route of its canonical path, so a
// spelling that some upstream resolves to a strict route can never reach a
// looser one (a catch-all) instead. Where canonical forms are ambiguous the
// segment matches nothing. The steps, on the segment decoded once:
//
//  1. A segment with bytes >= 0x80 must be valid UTF-8 (no overlong forms,
//     no surrogates) without control characters. It is folded: compatibility
//     decomposition (NFKD: full-width "ｔ" is "t", "ſ" is "s", "‥" is
//     ".."), nonspacing and enclosing marks and default-ignorable code points
//     (soft hyphen, zero-width space, variation selectors) removed, Unicode
//     spaces made " ", case mapped to lower through upper ("K" Kelvin sign
//     is "k", dotless "ı" is "i"), "ß" made "ss". A fold that yields "/" or
//     "\" matches nothing.
//  2. A "%" followed by two hex digits or by "u" and four hex digits (an
//     escape left after one decoding: "%2574") matches nothing: an upstream
//     that decodes twice would see another character.
//  3. From the first ";" on, the segment is a path parameter and dropped
//     ("transfers;x=1" is "transfers"), as servlet containers do.
//  4. A segment of only "." and " " (including one left empty by 3) matches
//     nothing: it is empty, a dot segment, or one to an upstream that trims.
//  5. Leading spaces and trailing spaces and dots are dropped
//     ("transfers%20", "transfers."), as Windows servers and trimming
//     routers do.
//  6. ASCII letters are lowercased.
//
// Literal segments of templates are held lowercased and may contain no ";"
// and end in no "."; see parseSegment.

// Flags of bytes, looked up per decoded byte so that an ordinary segment
// needs no work beyond the lookup.
const (
	fUpper    = 1 << iota // 'A'..'Z'
	fSemi                 // ';'
	fPercent              // '%' (decoded from %25, or folded)
	fNonASCII             // >= 0x80
	fEdge                 // ' ' or '.', which may need trimming
	fBad                  // '/', '\\' or a control character: only from a fold
)

var byteFlags = func() (t [256]uint8) {
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = fUpper
	}
	t[';'] = fSemi
	t['%'] = fPercent
	t[' '], t['.'] = fEdge, fEdge
	t['/'], t['\\'], t[0x7f] = fBad, fBad, fBad
	for c := 0; c < 0x20; c++ {
		t[c] = fBad
	}
	for c := 0x80; c < 0x100; c++ {
		t[c] = fNonASCII
	}
	return t
}()

// canonSegment rewrites buf[start:end], a segment decoded once whose bytes
// have the byte flags flags, to its canonical form in place, and returns
// its new end. It reports false if the segment must match nothing. A fold
// may lengthen the segment; it fails rather than run past buf.
func canonSegment(buf []byte, start, end int, flags uint8) (int, bool) {
	if flags&fNonASCII != 0 {
		var ok bool
		if end, ok = foldUnicode(buf, start, end); !ok {
			return 0, false
		}
		flags = 0
		for _, c := range buf[start:end] {
			flags |= byteFlags[c]
		}
		if flags&fBad != 0 {
			return 0, false
		}
	}
	seg := buf[start:end]
	if flags&fPercent != 0 && hasEscape(seg) {
		return 0, false
	}
	if flags&fSemi != 0 {
		for i, c := range seg {
			if c == ';' {
				seg = seg[:i]
				break
			}
		}
	}
	if flags&fEdge != 0 || len(seg) == 0 {
		if onlyDotsAndSpaces(seg) {
			return 0, false
		}
		lo, hi := 0, len(seg)
		for seg[lo] == ' ' {
			lo++
		}
		for seg[hi-1] == ' ' || seg[hi-1] == '.' {
			hi--
		}
		seg = seg[lo:hi]
	}
	if flags&fUpper != 0 {
		for i, c := range seg {
			if 'A' <= c && c <= 'Z' {
				seg[i] = c + ('a' - 'A')
			}
		}
	}
	return start + copy(buf[start:], seg), true
}

// onlyDotsAndSpaces reports whether seg is empty or made of '.' and ' '.
func onlyDotsAndSpaces(seg []byte) bool {
	for _, c := range seg {
		if c != '.' && c != ' ' {
			return false
		}
	}
	return true
}

// hasEscape reports whether seg holds a percent-escape ("%74") or an IIS
// %u escape ("%u0074").
func hasEscape(seg []byte) bool {
	for i, c := range seg {
		if c != '%' {
			continue
		}
		if i+2 < len(seg) && isHex(seg[i+1]) && isHex(seg[i+2]) {
			return true
		}
		if i+5 < len(seg) && (seg[i+1] == 'u' || seg[i+1] == 'U') &&
			isHex(seg[i+2]) && isHex(seg[i+3]) && isHex(seg[i+4]) && isHex(seg[i+5]) {
			return true
		}
	}
	return false
}

func isHex(c byte) bool {
	_, ok := unhex(c)
	return ok
}

// foldUnicode replaces buf[start:end], which holds bytes >= 0x80, by its
// Unicode fold (step 1 above) and returns the new end. It reports false for
// invalid UTF-8, a control character, or a fold that does not fit in buf.
func foldUnicode(buf []byte, start, end int) (int, bool) {
	seg := buf[start:end]
	if !utf8.Valid(seg) {
		return 0, false
	}
	// The decomposition gets its own copy of the segment: handing buf to
	// norm would make every lookup's scannedPath escape to the heap.
	decomposed := norm.NFKD.Bytes(append(make([]byte, 0, len(seg)), seg...))
	w := start
	put := func(r rune) bool {
		if w+utf8.RuneLen(r) > len(buf) {
			return false
		}
		w += utf8.EncodeRune(buf[w:], r)
		return true
	}
	for _, r := range string(decomposed) {
		switch {
		case unicode.IsControl(r):
			return 0, false
		case ignorable(r):
			continue
		case unicode.IsSpace(r):
			r = ' '
		case r == 'ß' || r == 'ẞ':
			for range 2 {
				if !put('s') {
					return 0, false
				}
			}
			continue
		}
		if !put(unicode.ToLower(unicode.ToUpper(r))) {
			return 0, false
		}
	}
	return w, true
}

// ignorable reports whether r is dropped by the fold: a nonspacing or
// enclosing mark, a format character (soft hyphen, zero-width space and
// joiners, bidirectional controls, byte order mark), a variation selector
// or another default-ignorable code point.
func ignorable(r rune) bool {
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point)
}
