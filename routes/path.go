package routes

import "strings"

// scannedPath is an escaped request path split into decoded segments. It is
// large (about 2 KiB) and meant to live on the caller's stack, so that a
// lookup allocates nothing.
type scannedPath struct {
	// buf holds the decoded segments back to back.
	buf [MaxPathLength]byte
	// ends[i] is the end offset in buf of segment i; segment i starts at
	// ends[i-1] (or 0).
	ends [MaxSegments]uint16
	// n is the number of segments; 0 for the root "/".
	n int
	// script is the index of the first segment but the last that names a
	// PHP script ("index.php"), or -1; see withoutScript.
	script int
}

// seg returns segment i, decoded and canonical (see canonSegment), as a
// view into buf.
func (s *scannedPath) seg(i int) []byte {
	start := uint16(0)
	if i > 0 {
		start = s.ends[i-1]
	}
	return s.buf[start:s.ends[i]]
}

// scan splits the escaped path p into segments, decoded once and made
// canonical. It reports false for a path that must match nothing (see the
// package documentation).
func (s *scannedPath) scan(p string) bool {
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	if p == "" || p[0] != '/' || len(p) > MaxPathLength {
		return false
	}
	s.n, s.script = 0, -1
	if p == "/" {
		return true
	}
	w := 0          // write offset in buf
	start := w      // start of the current segment in buf
	for i := 1; ; { // p[i:] is the unread rest; p[i-1] was '/'
		if s.n == MaxSegments {
			return false
		}
		var flags uint8
		for i < len(p) && p[i] != '/' {
			c := p[i]
			if c == '%' {
				if i+2 >= len(p) {
					return false
				}
				hi, ok1 := unhex(p[i+1])
				lo, ok2 := unhex(p[i+2])
				if !ok1 || !ok2 {
					return false
				}
				c = hi<<4 | lo
				if c == '/' || c == '\\' || c < 0x20 || c == 0x7f {
					return false
				}
				i += 3
			} else {
				if !isPathChar(c) {
					return false
				}
				i++
			}
			if w == len(s.buf) { // only after a fold lengthened a segment
				return false
			}
			s.buf[w] = c
			w++
			flags |= byteFlags[c]
		}
		if flags != 0 { // else the segment is canonical already
			var ok bool
			if w, ok = canonSegment(s.buf[:], start, w, flags); !ok {
				return false
			}
		} else if w == start {
			return false
		}
		s.ends[s.n] = uint16(w)
		s.n++
		if i == len(p) {
			return true
		}
		if s.script < 0 && isScript(s.buf[start:w]) { // not the last segment
			s.script = s.n - 1
		}
		i++ // skip '/'
		start = w
		if i == len(p) { // trailing slash: an empty final segment
			return false
		}
	}
}

// isScript reports whether the canonical segment seg names a PHP script:
// it ends in ".php" after at least one other byte.
func isScript(seg []byte) bool {
	return len(seg) > len(".php") && string(seg[len(seg)-len(".php"):]) == ".php"
}

// withoutScript returns the path without its segment s.script, as a PHP
// front controller reads it: Laravel and Symfony take the request path up
// to and including the script's name ("/index.php", or "/app/index.php"
// for an application below /app) as the base URL and route the rest, so
// "/index.php/v1/transfers" is their /v1/transfers and
// "/app/index.php/v1/transfers" the /app/v1/transfers of the gateway's
// templates. A last segment is never taken for a script: "/v1/files/x.php"
// is not read as /v1/files. s must have a script segment.
func (s *scannedPath) withoutScript() scannedPath {
	var out scannedPath
	out.script = -1
	w := 0
	for i := 0; i < s.n; i++ {
		if i == s.script {
			continue
		}
		w += copy(out.buf[w:], s.seg(i))
		out.ends[out.n] = uint16(w)
		out.n++
	}
	return out
}

// isPathChar reports whether c may appear unencoded in an escaped path: the
// RFC 3986 pchar set, plus "[" and "]" which net/url also leaves unescaped.
// A raw backslash is not among them.
func isPathChar(c byte) bool {
	return isLiteralChar(c) || c == '[' || c == ']'
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
