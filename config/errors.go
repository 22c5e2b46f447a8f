package config

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// FieldError is one problem of a configuration.
type FieldError struct {
	// Path locates the key, such as "policies.transfers.limits.free.rate"
	// or "routes[2].path". A name that is not plain ([A-Za-z0-9_-] or "*")
	// is quoted in brackets: `upstreams["api.v2"].url`. An empty Path means
	// the whole configuration.
	Path string
	// Problem says what is wrong, such as "must be > 0".
	Problem string
}

// Error returns "path: problem".
func (e *FieldError) Error() string {
	if e.Path == "" {
		return e.Problem
	}
	return e.Path + ": " + e.Problem
}

// Errors is every problem found in a configuration, sorted by path. It is
// never empty when returned as an error.
type Errors []*FieldError

// Error returns one problem per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the individual problems, for errors.As.
func (es Errors) Unwrap() []error {
	errs := make([]error, len(es))
	for i, e := range es {
		errs[i] = e
	}
	return errs
}

// add records a problem.
func (es *Errors) add(path, problem string) {
	*es = append(*es, &FieldError{Path: path, Problem: problem})
}

// addf records a problem formatted by fmt.Sprintf.
func (es *Errors) addf(path, format string, args ...any) {
	es.add(path, fmt.Sprintf(format, args...))
}

// sort orders the problems by path, comparing numbers in paths by value so
// that routes[2] comes before routes[10], and drops exact duplicates.
func (es Errors) sort() Errors {
	slices.SortStableFunc(es, func(a, b *FieldError) int {
		if c := naturalCompare(a.Path, b.Path); c != 0 {
			return c
		}
		return strings.Compare(a.Problem, b.Problem)
	})
	return slices.CompactFunc(es, func(a, b *FieldError) bool {
		return a.Path == b.Path && a.Problem == b.Problem
	})
}

// naturalCompare compares strings, runs of digits by numeric value.
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digitRun(a), digitRun(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := len(na) - len(nb); c != 0 {
				return c
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

func digitRun(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// join appends a mapping key to a path.
func join(path, key string) string {
	if !plainKey.MatchString(key) && key != "*" {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// index appends a list index to a path.
func index(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// under reports whether path is p or lies below it.
func under(path, p string) bool {
	if !strings.HasPrefix(path, p) {
		return false
	}
	rest := path[len(p):]
	return rest == "" || rest[0] == '.' || rest[0] == '['
}
