// Package headername compares HTTP header names the way the upstreams behind
// a gateway may read them: ASCII case ignored, and "_" the same as "-"
// (CGI, WSGI and Rack turn both into one variable name).
package headername

// Equal reports whether name equals lower, which must be lowercase with "-"
// for separators. Names of different lengths are never equal. It does not
// allocate.
func Equal(name, lower string) bool {
	if len(name) != len(lower) {
		return false
	}
	for i := 0; i < len(name); i++ {
		if fold(name[i]) != lower[i] {
			return false
		}
	}
	return true
}

// Same reports whether the names a and b are equal ignoring ASCII case and
// reading "_" as "-", whatever their spelling. It does not allocate.
func Same(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if fold(a[i]) != fold(b[i]) {
			return false
		}
	}
	return true
}

// fold is c lowercased, with "_" read as "-".
func fold(c byte) byte {
	switch {
	case c == '_':
		return '-'
	case 'A' <= c && c <= 'Z':
		return c + 'a' - 'A'
	}
	return c
}
