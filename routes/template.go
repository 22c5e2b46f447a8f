package routes

import (
	"errors"
	"fmt"
	"strings"
)

// MaxPathLength is the longest escaped path, in bytes, that can match a
// route, and the longest template.
const MaxPathLength = 2048

// MaxSegments is the largest number of segments a matching path or a
// template may have.
const MaxSegments = 32

// segKind is the kind of one template segment.
type segKind uint8

const (
	segLiteral  segKind = iota // matches itself, exactly
	segParam                   // {name}: one non-empty segment
	segCatchAll                // {name...}: one or more final segments
)

// segment is one parsed template segment.
type segment struct {
	kind segKind
	// text is the literal in canonical form, lowercased (segLiteral), or
	// the parameter name.
	text string
}

// ValidateTemplate reports whether path is a valid route template (see the
// package documentation). The error names the offending segment.
func ValidateTemplate(path string) error {
	_, err := parseTemplate(path)
	return err
}

// parseTemplate splits a template into segments. The root "/" has none.
func parseTemplate(path string) ([]segment, error) {
	switch {
	case path == "":
		return nil, errors.New("empty template")
	case path[0] != '/':
		return nil, fmt.Errorf("template %q: must start with \"/\"", path)
	case len(path) > MaxPathLength:
		return nil, fmt.Errorf("template: longer than %d bytes", MaxPathLength)
	case path == "/":
		return nil, nil
	}
	parts := strings.Split(path[1:], "/")
	if len(parts) > MaxSegments {
		return nil, fmt.Errorf("template %q: more than %d segments", path, MaxSegments)
	}
	segs := make([]segment, 0, len(parts))
	seen := make(map[string]bool)
	for i, p := range parts {
		s, err := parseSegment(p, i == len(parts)-1)
		if err != nil {
			return nil, fmt.Errorf("template %q: segment %d %q: %w", path, i+1, p, err)
		}
		if s.kind != segLiteral {
			if seen[s.text] {
				return nil, fmt.Errorf("template %q: segment %d: duplicate parameter name %q", path, i+1, s.text)
			}
			seen[s.text] = true
		}
		segs = append(segs, s)
	}
	return segs, nil
}

// parseSegment parses one template segment; last reports whether it is the
// final one (where a catch-all may stand).
func parseSegment(p string, last bool) (segment, error) {
	if p == "" {
		if last {
			return segment{}, errors.New("trailing slash (only the root \"/\" ends in one)")
		}
		return segment{}, errors.New("empty segment")
	}
	if p[0] == '{' {
		if p[len(p)-1] != '}' {
			return segment{}, errors.New("a parameter must be the whole segment, {name} or {name...}")
		}
		name, kind := p[1:len(p)-1], segParam
		if n, ok := strings.CutSuffix(name, "..."); ok {
			if !last {
				return segment{}, errors.New("{name...} may only be the final segment")
			}
			name, kind = n, segCatchAll
		}
		if !isIdentifier(name) {
			return segment{}, fmt.Errorf("parameter name %q: want a letter or _ followed by letters, digits or _", name)
		}
		return segment{kind: kind, text: name}, nil
	}
	if p == "." || p == ".." {
		return segment{}, errors.New("dot segments are not allowed")
	}
	for i := 0; i < len(p); i++ {
		if !isLiteralChar(p[i]) {
			return segment{}, fmt.Errorf("character %q is not allowed in a literal segment", p[i])
		}
	}
	if strings.IndexByte(p, ';') >= 0 {
		return segment{}, errors.New(`";" starts a path parameter, which requests are matched without`)
	}
	if p[len(p)-1] == '.' {
		return segment{}, errors.New(`a literal segment must not end in "." (requests are matched without trailing dots)`)
	}
	return segment{kind: segLiteral, text: strings.ToLower(p)}, nil
}

// isIdentifier reports whether s is a letter or underscore followed by
// letters, digits or underscores (ASCII).
func isIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// isLiteralChar reports whether c may appear in a literal template segment:
// an RFC 3986 pchar other than a percent-encoding.
func isLiteralChar(c byte) bool {
	if isUnreserved(c) {
		return true
	}
	switch c {
	case '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', ':', '@':
		return true
	}
	return false
}

func isUnreserved(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return c == '-' || c == '.' || c == '_' || c == '~'
}
