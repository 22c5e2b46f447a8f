package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSyntaxErrorsNameTheRightLine loads each fixture of testdata/syntax,
// whose "# want: " comment says the error it must give. The YAML parser
// numbers the lines of its own errors from 0 and gives none on the first
// line; these fixtures were one line off before the loader corrected it.
func TestSyntaxErrorsNameTheRightLine(t *testing.T) {
	files, err := filepath.Glob("testdata/syntax/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, name := range files {
		t.Run(filepath.Base(name), func(t *testing.T) {
			data, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			_, want, ok := bytes.Cut(data, []byte("# want: "))
			if !ok {
				t.Fatal("fixture has no # want: comment")
			}
			want, _, _ = bytes.Cut(want, []byte("\n"))
			_, err = Load(name, noEnv)
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Load: %v, want a *SyntaxError", err)
			}
			if !strings.HasSuffix(err.Error(), "yaml: "+string(want)) {
				t.Errorf("Load: %v\nwant it to end with: yaml: %s", err, want)
			}
			if !strings.Contains(err.Error(), name) {
				t.Errorf("Load: %v, want it to name the file", err)
			}
		})
	}
}

func TestSyntaxErrorLines(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		line int
		eof  bool
	}{
		{"a: b: c\n", 1, false},               // scanner, first line: no line from the parser
		{"- a\nb: 1\n", 2, false},             // parser, context on the first line
		{"a: 1\n- b\n", 2, false},             // parser, problem line only
		{"a:\n  b: 1\n  - c\n", 3, false},     // parser, context two lines up
		{"a: [1,\n  2\nb: 3\n", 3, false},     // unclosed: where a "]" was due
		{"a: \"x\n\nb: 1\n", 3, true},         // unclosed quote: the end of the file
		{"a: 1\nb: [\n", 2, true},             // end of file, with a final newline
		{"a: 1\nb: [", 2, true},               // and without
		{"a:\n  b: |\n   x\n  c\n", 4, false}, // a block scalar before the problem
	} {
		_, err := Parse([]byte(tc.doc), noEnv)
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("%q: %v, want a *SyntaxError", tc.doc, err)
			continue
		}
		if se.Line != tc.line || se.EOF != tc.eof {
			t.Errorf("%q: line %d eof %t (%v), want line %d eof %t", tc.doc, se.Line, se.EOF, err, tc.line, tc.eof)
		}
	}
	// Not a syntax error: no position to correct, returned as the parser said.
	if _, err := Parse([]byte("a: *nope\n"), noEnv); err == nil || errors.As(err, new(*SyntaxError)) {
		t.Errorf("unknown anchor: %v, want the parser's error", err)
	}
}

// BenchmarkSyntaxErrorLine: finding the line of an error at the end of a
// 5,000-line file takes O(log n) parses, never one per line.
func BenchmarkSyntaxErrorLine(b *testing.B) {
	var doc strings.Builder
	doc.WriteString("x:\n")
	for i := range 5000 {
		fmt.Fprintf(&doc, "  k%d: 1\n", i)
	}
	doc.WriteString("  - bad\n")
	data := []byte(doc.String())
	b.ReportAllocs()
	for b.Loop() {
		_, err := Parse(data, noEnv)
		var se *SyntaxError
		if !errors.As(err, &se) || se.Line != 5002 {
			b.Fatalf("%v", err)
		}
	}
}
