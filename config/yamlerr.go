package config

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// SyntaxError is a configuration file that is not well-formed YAML.
type SyntaxError struct {
	// Line is the 1-based line of the problem: where the YAML parser was
	// when it gave up, or where the construct it could not finish (an
	// unclosed bracket or quote) begins. Past the last line means the end
	// of the file. 0 means the parser gave no position.
	Line int
	// Problem is the parser's description, such as "did not find expected
	// ',' or ']'".
	Problem string
	// EOF says the parser reached the end of the file still expecting
	// more; Line is then the file's last line.
	EOF bool
}

func (e *SyntaxError) Error() string {
	switch {
	case e.Line == 0:
		return "yaml: " + e.Problem
	case e.EOF:
		return fmt.Sprintf("yaml: line %d (end of file): %s", e.Line, e.Problem)
	}
	return fmt.Sprintf("yaml: line %d: %s", e.Line, e.Problem)
}

var yamlLineRE = regexp.MustCompile(`^yaml: (?:line (\d+): )?(.*)$`)

// yamlSyntaxError corrects the line number of a syntax error from
// go.yaml.in/yaml/v3. That parser numbers lines from 0 in its marks and adds
// 1 only for errors of its scanner: an error of its parser (an unclosed flow
// collection, a missing key) names the line before the right one, and an
// error on the first line names no line at all. Errors that are not syntax
// errors are returned unchanged. data is the document that failed.
func yamlSyntaxError(err error, data []byte) error {
	m := yamlLineRE.FindStringSubmatch(err.Error())
	if m == nil || strings.Contains(err.Error(), "\n") {
		return err
	}
	line := 0
	if m[1] != "" {
		n, convErr := strconv.Atoi(m[1])
		if convErr != nil {
			return err
		}
		line = n
	}
	problem := m[2]
	switch {
	case yamlParserProblems[problem]:
		line++ // reported from 0, or not at all on the first line
	case line == 0 && isScannerProblem(problem):
		line = 1 // reported from 1, but not at all on the first line
	case line == 0:
		return err // a problem without a position (an unknown anchor, ...)
	}
	se := &SyntaxError{Line: line, Problem: problem}
	lines := bytes.SplitAfter(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	switch {
	case line > len(lines):
		// The end of a file that ends with a newline is on the line after it.
		se.Line, se.EOF = len(lines), true
	case len(lines) <= maxRefineLines:
		se.Line = problemLine(lines, line, err.Error())
	}
	return se
}

// maxRefineLines bounds the files whose errors problemLine refines.
const maxRefineLines = 100_000

// problemLine finds the line of a syntax error more precisely than the
// parser names it. Where the parser has a context it names where that
// construct begins (a block mapping, a plain scalar), which can be lines
// before the offending one (a list item inside that mapping, a tab in the
// scalar's continuation). The prefixes of the file that end before the
// offending line parse (or fail otherwise), those that end on or after it
// fail with the same problem: a binary search from the named line on finds
// the first of them, in O(log n) parses. When no prefix fails that way the
// named line stands.
func problemLine(lines [][]byte, from int, msg string) int {
	failsAlike := func(k int) bool {
		var n yaml.Node // parsed only: decoding a large mapping is quadratic
		err := yaml.Unmarshal(bytes.Join(lines[:k], nil), &n)
		return err != nil && sameProblem(err.Error(), msg)
	}
	lo, hi := from, len(lines)
	for lo < hi {
		mid := lo + (hi-lo)/2
		if failsAlike(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	if lo != from && !failsAlike(lo) {
		return from
	}
	return lo
}

// sameProblem compares two syntax error messages without their positions.
func sameProblem(a, b string) bool {
	ma, mb := yamlLineRE.FindStringSubmatch(a), yamlLineRE.FindStringSubmatch(b)
	return ma != nil && mb != nil && ma[2] == mb[2]
}

// yamlParserProblems are the problems go.yaml.in/yaml/v3's parser (not its
// scanner) reports (parserc.go).
var yamlParserProblems = map[string]bool{
	"did not find expected <stream-start>":   true,
	"did not find expected <document start>": true,
	"found undefined tag handle":             true,
	"did not find expected node content":     true,
	"did not find expected '-' indicator":    true,
	"did not find expected key":              true,
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"found duplicate %YAML directive":        true,
	"found incompatible YAML document":       true,
	"found duplicate %TAG directive":         true,
}

// isScannerProblem reports whether problem is one go.yaml.in/yaml/v3's
// scanner (scannerc.go) reports with a position.
func isScannerProblem(problem string) bool {
	for _, p := range []string{"found ", "did not find ", "could not find ", "mapping values are not allowed",
		"mapping keys are not allowed", "block sequence entries are not allowed", "exceeded max depth"} {
		if strings.HasPrefix(problem, p) {
			return true
		}
	}
	return false
}
