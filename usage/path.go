package usage

import (
	"errors"
	"fmt"
	"strings"
)

// MaxSegments is the most keys a JSON path may have.
const MaxSegments = 16

// path is a parsed dotted JSON path. The zero value matches nothing.
type path struct {
	s    string
	ends [MaxSegments]uint16 // segment i is s[start(i):ends[i]]
	n    int
}

// maxPathLen bounds a path's length in bytes so that offsets fit a uint16.
const maxPathLen = 1024

var errEmptyPath = errors.New("empty path")

// parsePath parses a dotted path; see the package doc.
func parsePath(s string) (path, error) {
	var p path
	if s == "" {
		return p, errEmptyPath
	}
	if len(s) > maxPathLen {
		return p, fmt.Errorf("path longer than %d bytes", maxPathLen)
	}
	start := 0
	for {
		i := strings.IndexByte(s[start:], '.')
		end := len(s)
		if i >= 0 {
			end = start + i
		}
		if end == start {
			return path{}, fmt.Errorf("path %q has an empty key", s)
		}
		if p.n == MaxSegments {
			return path{}, fmt.Errorf("path %q has more than %d keys", s, MaxSegments)
		}
		p.ends[p.n] = uint16(end)
		p.n++
		if i < 0 {
			break
		}
		start = end + 1
	}
	p.s = s
	return p, nil
}

// seg returns the i-th key, 0 <= i < p.n.
func (p *path) seg(i int) string {
	start := 0
	if i > 0 {
		start = int(p.ends[i-1]) + 1
	}
	return p.s[start:p.ends[i]]
}
