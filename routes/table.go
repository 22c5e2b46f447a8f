package routes

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
)

// Spec is one configured route.
type Spec struct {
	// Name is the bounded route name used in keys, metrics and spans; see
	// ValidateName.
	Name string
	// Method is the HTTP method, matched case-sensitively ("GET").
	Method string
	// Path is the template; see the package documentation.
	Path string
}

// Match is the route a request matched.
type Match struct {
	// Index is the position of the matched spec in the slice given to
	// NewTable.
	Index int
	// Name is the spec's Name.
	Name string
	// Template is the spec's Path.
	Template string
}

// SpecError is the error NewTable returns for an invalid spec.
type SpecError struct {
	// Index is the position of the spec in the slice given to NewTable.
	Index int
	// Field is "name", "method" or "path".
	Field string
	Err   error
}

func (e *SpecError) Error() string {
	return fmt.Sprintf("routes: spec %d: %s: %v", e.Index, e.Field, e.Err)
}

func (e *SpecError) Unwrap() error { return e.Err }

// Table matches requests against a fixed list of specs. It is immutable and
// safe for concurrent use; the zero value matches nothing.
type Table struct {
	specs []Spec
	root  *node
}

// node is one trie level. A path reaches a node after matching one segment
// per level from the root.
type node struct {
	literal  map[string]*node // children by decoded literal segment
	param    *node            // child for {name}
	leaves   []leaf           // specs whose template ends at this node, by index
	catchAll []leaf           // specs whose template continues with {name...} here, by index
	// minIndex is the lowest spec index in this subtree (including
	// catchAll); math.MaxInt when empty.
	minIndex int
}

// leaf is a spec that ends at a node.
type leaf struct {
	method string
	index  int
}

// NewTable builds a table from specs; the first matching spec in this order
// wins. It returns a *SpecError for the first invalid spec: a bad name,
// method or template, or a spec with the same method and template shape as an
// earlier one (it could never match).
func NewTable(specs []Spec) (*Table, error) {
	t := &Table{specs: append([]Spec(nil), specs...), root: newNode()}
	for i, s := range t.specs {
		if err := ValidateName(s.Name); err != nil {
			return nil, &SpecError{Index: i, Field: "name", Err: err}
		}
		if !isToken(s.Method) {
			return nil, &SpecError{Index: i, Field: "method", Err: fmt.Errorf("%q is not an HTTP method token", s.Method)}
		}
		segs, err := parseTemplate(s.Path)
		if err != nil {
			return nil, &SpecError{Index: i, Field: "path", Err: err}
		}
		if err := t.insert(segs, s.Method, i); err != nil {
			return nil, &SpecError{Index: i, Field: "path", Err: err}
		}
	}
	return t, nil
}

func newNode() *node { return &node{minIndex: math.MaxInt} }

// insert adds spec index to the trie. Specs are inserted in index order, so
// every leaf list stays sorted and minIndex is set by the first spec through.
func (t *Table) insert(segs []segment, method string, index int) error {
	n := t.root
	n.minIndex = min(n.minIndex, index)
	for _, s := range segs {
		switch s.kind {
		case segLiteral:
			c := n.literal[s.text]
			if c == nil {
				if n.literal == nil {
					n.literal = make(map[string]*node)
				}
				c = newNode()
				n.literal[s.text] = c
			}
			n = c
		case segParam:
			if n.param == nil {
				n.param = newNode()
			}
			n = n.param
		case segCatchAll:
			return addLeaf(&n.catchAll, method, index, t.specs)
		}
		n.minIndex = min(n.minIndex, index)
	}
	return addLeaf(&n.leaves, method, index, t.specs)
}

// addLeaf appends (method, index) unless the method is already there.
func addLeaf(leaves *[]leaf, method string, index int, specs []Spec) error {
	for _, l := range *leaves {
		if l.method == method {
			return fmt.Errorf("same method and template shape as spec %d (%q), which always matches first", l.index, specs[l.index].Path)
		}
	}
	*leaves = append(*leaves, leaf{method: method, index: index})
	return nil
}

// Match returns the first spec, in declaration order, whose method and
// template match. escapedPath is r.URL.EscapedPath(). It reports false when
// nothing matches, including for every malformed path listed in the package
// documentation. A HEAD request falls back to GET routes when no HEAD route
// matches.
func (t *Table) Match(method, escapedPath string) (Match, bool) {
	if t == nil || t.root == nil {
		return Match{}, false
	}
	var p scannedPath
	if !p.scan(escapedPath) {
		return Match{}, false
	}
	var front *scannedPath
	if p.script >= 0 {
		q := p.withoutScript()
		front = &q
	}
	best := searchPaths(t.root, &p, front, method)
	if best == math.MaxInt && method == "HEAD" {
		best = searchPaths(t.root, &p, front, "GET")
	}
	if best == math.MaxInt {
		return Match{}, false
	}
	s := t.specs[best]
	return Match{Index: best, Name: s.Name, Template: s.Path}, true
}

// searchPaths returns the lowest spec index that p matches for method,
// or that front, p as a PHP front controller reads it, matches when not
// nil; math.MaxInt when neither matches.
func searchPaths(root *node, p, front *scannedPath, method string) int {
	best := search(root, p, 0, method, math.MaxInt)
	if front != nil {
		best = search(root, front, 0, method, best)
	}
	return best
}

// search returns the lowest spec index below n that matches segments
// depth.. of p for method, or best if none is lower than best.
func search(n *node, p *scannedPath, depth int, method string, best int) int {
	if n.minIndex >= best {
		return best
	}
	if depth == p.n {
		return lowest(n.leaves, method, best)
	}
	best = lowest(n.catchAll, method, best)
	seg := p.seg(depth)
	if c := n.literal[string(seg)]; c != nil {
		best = search(c, p, depth+1, method, best)
	}
	if depth == p.n-1 {
		if stem, ok := formatStem(seg); ok {
			if c := n.literal[string(stem)]; c != nil {
				best = search(c, p, depth+1, method, best)
			}
		}
	}
	if n.param != nil {
		best = search(n.param, p, depth+1, method, best)
	}
	return best
}

// formatStem returns the part of a canonical last segment before its first
// ".", and whether there is one: "users" for "users.json" and
// "users.tar.gz". Rails routes "/users.json" to the route "/users" (with
// format json), and Spring's suffix pattern matching serves any "/users.*"
// there, so a literal last segment without a "." also matches its own
// spelling with a format suffix. A literal holding a "." ("report.csv") is
// matched only as written: such a stem is never looked up.
func formatStem(seg []byte) ([]byte, bool) {
	i := bytes.IndexByte(seg, '.')
	if i <= 0 {
		return nil, false
	}
	return seg[:i], true
}

// lowest returns the index of the first leaf with method if it is below
// best, else best. Leaves are sorted by index.
func lowest(leaves []leaf, method string, best int) int {
	for _, l := range leaves {
		if l.index >= best {
			break
		}
		if l.method == method {
			return l.index
		}
	}
	return best
}

// Specs returns a copy of the table's specs, in declaration order.
func (t *Table) Specs() []Spec {
	if t == nil {
		return nil
	}
	return append([]Spec(nil), t.specs...)
}

// ValidateName reports whether name can name a route or a policy: 1 to 64
// ASCII letters, digits, '.', '_' or '-'. Such names are safe in store keys,
// metric labels and span attributes.
func ValidateName(name string) error {
	if name == "" {
		return errors.New("empty name")
	}
	if len(name) > 64 {
		return fmt.Errorf("name %.20q...: longer than 64 bytes", name)
	}
	if i := strings.IndexFunc(name, func(r rune) bool {
		return !(r < 0x80 && (isUnreserved(byte(r)) && r != '~'))
	}); i >= 0 {
		return fmt.Errorf("name %q: character %q not allowed (letters, digits, '.', '_', '-')", name, name[i])
	}
	return nil
}

// isToken reports whether s is an RFC 9110 token, the syntax of a method.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isUnreserved(c) {
			continue
		}
		switch c {
		case '!', '#', '$', '%', '&', '\'', '*', '+', '^', '`', '|':
			continue
		}
		return false
	}
	return true
}
