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
		c := name[i]
		switch {
		case c == '_':
			c = '-'
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}
