package routes

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzMatch checks that Match never panics, is stable, and agrees with a
// plain reference matcher built on strings.Split and url.PathUnescape: the
// matched spec's template really matches, and no earlier spec does.
func FuzzMatch(f *testing.F) {
	tab := mustTable(f, testSpecs)
	for _, seed := range []string{
		"/", "/v1/transfers/1", "/v1/transfers/1/", "/v1//x", "/v1/files/a/b",
		"/v1/%74ransfers/%2e%2E", "/v1/transfers/a%2Fb", "/v1/items/x/sub",
		"/v2/a/b", "/v1/thing%3arun", "/?q", "%", "/v1/transfers/%C3%A9",
	} {
		f.Add("GET", seed)
		f.Add("HEAD", seed)
	}
	f.Add("POST", "/v1/transfers/x")
	f.Fuzz(func(t *testing.T, method, path string) {
		m1, ok1 := tab.Match(method, path)
		m2, ok2 := tab.Match(method, path)
		if ok1 != ok2 || m1 != m2 {
			t.Fatalf("unstable: %+v %v then %+v %v", m1, ok1, m2, ok2)
		}
		want := refMatch(testSpecs, method, path)
		got := -1
		if ok1 {
			got = m1.Index
			if m1.Name != testSpecs[got].Name || m1.Template != testSpecs[got].Path {
				t.Fatalf("match %+v inconsistent with spec %d", m1, got)
			}
		}
		if got != want {
			t.Fatalf("Match(%q, %q) = %d, reference %d", method, path, got, want)
		}
	})
}

// refMatch is the reference: the first spec (then the first GET spec for
// HEAD) whose template matches the decoded segments of path, or -1.
func refMatch(specs []Spec, method, path string) int {
	path, _, _ = strings.Cut(path, "?")
	segs, ok := refSegments(path)
	if !ok {
		return -1
	}
	for _, m := range []string{method, "GET"} {
		for i, s := range specs {
			if s.Method == m && refTemplateMatches(s.Path, segs) {
				return i
			}
		}
		if method != "HEAD" {
			break
		}
	}
	return -1
}

const refPathChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:@[]%"

// refSegments splits and decodes path, or reports false if it must match
// nothing.
func refSegments(path string) ([]string, bool) {
	if !strings.HasPrefix(path, "/") || len(path) > MaxPathLength {
		return nil, false
	}
	if path == "/" {
		return nil, true
	}
	parts := strings.Split(path[1:], "/")
	if len(parts) > MaxSegments {
		return nil, false
	}
	for i, p := range parts {
		if p == "" {
			return nil, false
		}
		for _, c := range []byte(p) {
			if !strings.ContainsRune(refPathChars, rune(c)) {
				return nil, false
			}
		}
		d, err := url.PathUnescape(p)
		if err != nil || d == "." || d == ".." || strings.ContainsAny(d, "/\\") {
			return nil, false
		}
		for _, c := range []byte(d) {
			if c < 0x20 || c == 0x7f {
				return nil, false
			}
		}
		parts[i] = d
	}
	return parts, true
}

func refTemplateMatches(template string, segs []string) bool {
	if template == "/" {
		return len(segs) == 0
	}
	tsegs := strings.Split(template[1:], "/")
	for i, ts := range tsegs {
		switch {
		case strings.HasSuffix(ts, "...}"):
			return len(segs) > i
		case strings.HasPrefix(ts, "{"):
			if i >= len(segs) {
				return false
			}
		default:
			if i >= len(segs) || segs[i] != ts {
				return false
			}
		}
	}
	return len(segs) == len(tsegs)
}
