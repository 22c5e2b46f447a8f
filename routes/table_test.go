package routes

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// testSpecs is the table most match tests use. The order matters: the first
// matching spec wins.
var testSpecs = []Spec{
	0:  {Name: "transfers.create", Method: "POST", Path: "/v1/transfers/{id}"},
	1:  {Name: "transfers.get", Method: "GET", Path: "/v1/transfers/{id}"},
	2:  {Name: "transfers.search", Method: "GET", Path: "/v1/transfers/search"}, // shadowed by 1
	3:  {Name: "accounts.me", Method: "GET", Path: "/v1/accounts/me"},
	4:  {Name: "accounts.get", Method: "GET", Path: "/v1/accounts/{id}"},
	5:  {Name: "files", Method: "GET", Path: "/v1/files/{path...}"},
	6:  {Name: "root", Method: "GET", Path: "/"},
	7:  {Name: "probe", Method: "HEAD", Path: "/v1/probe"},
	8:  {Name: "probe.get", Method: "GET", Path: "/v1/probe"},
	9:  {Name: "items.sub", Method: "GET", Path: "/v1/items/{id}/sub"},
	10: {Name: "items.lit", Method: "GET", Path: "/v1/items/x/{sub}"},
	11: {Name: "catch", Method: "GET", Path: "/v2/{rest...}"},
	12: {Name: "v2.lit", Method: "GET", Path: "/v2/a/b"}, // shadowed by 11
	13: {Name: "colon", Method: "GET", Path: "/v1/thing:run"},
}

func mustTable(t testing.TB, specs []Spec) *Table {
	t.Helper()
	tab, err := NewTable(specs)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

func TestMatch(t *testing.T) {
	tab := mustTable(t, testSpecs)
	long := "/v1/files/" + strings.Repeat("a", MaxPathLength-len("/v1/files/"))
	tooLong := long + "a"
	maxSegs := "/v1/files" + strings.Repeat("/a", MaxSegments-2)
	tooManySegs := maxSegs + "/a"
	const none = -1
	tests := []struct {
		why    string
		method string
		path   string
		want   int // spec index, or none
	}{
		{"param", "POST", "/v1/transfers/1", 0},
		{"same template, other method", "GET", "/v1/transfers/1", 1},
		{"first match wins over a later literal", "GET", "/v1/transfers/search", 1},
		{"earlier literal beats later param", "GET", "/v1/accounts/me", 3},
		{"param when the literal does not match", "GET", "/v1/accounts/42", 4},
		{"methods are case-sensitive", "get", "/v1/transfers/1", none},
		{"unknown method", "PATCH", "/v1/transfers/1", none},
		{"HEAD falls back to GET", "HEAD", "/v1/transfers/1", 1},
		{"HEAD route preferred over GET", "HEAD", "/v1/probe", 7},
		{"GET does not take a HEAD route", "GET", "/v1/probe", 8},
		{"head lower-case does not fall back", "head", "/v1/transfers/1", none},
		{"root", "GET", "/", 6},
		{"root HEAD", "HEAD", "/", 6},
		{"empty path", "GET", "", none},
		{"trailing slash significant", "GET", "/v1/transfers/1/", none},
		{"trailing slash on literal", "GET", "/v1/accounts/me/", none},
		{"empty segment", "GET", "/v1//transfers/1", none},
		{"double slash at start", "GET", "//v1/transfers/1", none},
		{"only slashes", "GET", "//", none},
		{"catch-all one segment", "GET", "/v1/files/a", 5},
		{"catch-all many segments", "GET", "/v1/files/a/b/c.txt", 5},
		{"catch-all needs a segment", "GET", "/v1/files", none},
		{"catch-all trailing slash", "GET", "/v1/files/a/", none},
		{"catch-all empty inner segment", "GET", "/v1/files/a//b", none},
		{"catch-all dot-dot", "GET", "/v1/files/a/../../admin", none},
		{"catch-all wins when declared first", "GET", "/v2/a/b", 11},
		{"backtrack from literal branch to param", "GET", "/v1/items/x/sub", 9},
		{"literal branch when param fails", "GET", "/v1/items/x/y", 10},
		{"dot segment", "GET", "/v1/transfers/.", none},
		{"dot-dot segment", "GET", "/v1/transfers/..", none},
		{"dot-dot in the middle", "GET", "/v1/x/../transfers/1", none},
		{"encoded dot", "GET", "/v1/transfers/%2e", none},
		{"encoded dot-dot", "GET", "/v1/transfers/%2E%2e", none},
		{"half-encoded dot-dot", "GET", "/v1/transfers/.%2E", none},
		{"three dots are a dot segment to an upstream that trims dots", "GET", "/v1/transfers/...", none},
		{"dot inside a segment", "GET", "/v1/files/a.txt", 5},
		{"encoded slash upper", "GET", "/v1/transfers/a%2Fb", none},
		{"encoded slash lower", "GET", "/v1/transfers/a%2fb", none},
		{"encoded backslash", "GET", "/v1/transfers/a%5Cb", none},
		{"raw backslash", "GET", "/v1/transfers/a\\b", none},
		{"encoded NUL", "GET", "/v1/transfers/a%00", none},
		{"encoded newline", "GET", "/v1/transfers/a%0A", none},
		{"invalid percent", "GET", "/v1/transfers/%zz", none},
		{"truncated percent", "GET", "/v1/transfers/a%2", none},
		{"lone percent", "GET", "/v1/transfers/%", none},
		{"encoded literal decodes", "GET", "/v1/%74ransfers/1", 1},
		{"encoded literal lower hex", "GET", "/v1/accounts/%6De", 3},
		{"encoded space in param", "GET", "/v1/transfers/a%20b", 1},
		{"encoded percent in param", "GET", "/v1/transfers/100%25", 1},
		{"utf-8 in param", "GET", "/v1/transfers/%C3%A9", 1},
		{"raw space", "GET", "/v1/transfers/a b", none},
		{"raw non-ASCII", "GET", "/v1/transfers/\xc3\xa9", none},
		{"colon literal", "GET", "/v1/thing:run", 13},
		{"encoded colon literal", "GET", "/v1/thing%3Arun", 13},
		{"brackets allowed as in net/url", "GET", "/v1/transfers/[1]", 1},
		{"not origin-form", "GET", "v1/transfers/1", none},
		{"absolute-form", "GET", "http://x/v1/transfers/1", none},
		{"asterisk-form", "OPTIONS", "*", none},
		{"query ignored", "GET", "/v1/transfers/1?x=/a/../b", 1},
		{"query on root", "GET", "/?a=b", 6},
		{"query after trailing slash", "GET", "/v1/transfers/1/?x", none},
		{"longest path", "GET", long, 5},
		{"path too long", "GET", tooLong, none},
		{"most segments", "GET", maxSegs, 5},
		{"too many segments", "GET", tooManySegs, none},
		{"literal segments match in any case", "GET", "/V1/transfers/1", 1},
		{"unknown path", "GET", "/nope", none},
	}
	for _, tt := range tests {
		m, ok := tab.Match(tt.method, tt.path)
		got := none
		if ok {
			got = m.Index
			if m.Name != testSpecs[m.Index].Name || m.Template != testSpecs[m.Index].Path {
				t.Errorf("%s: Match returned %+v, inconsistent with spec %d", tt.why, m, m.Index)
			}
		}
		if got != tt.want {
			t.Errorf("%s: Match(%q, %.60q) = %d, want %d", tt.why, tt.method, tt.path, got, tt.want)
		}
	}
}

// TestMatchEscapedPath checks the intended use: the escaped path of a parsed
// request, whose query net/http has already split off.
func TestMatchEscapedPath(t *testing.T) {
	tab := mustTable(t, testSpecs)
	tests := []struct {
		target string
		want   int
	}{
		{"/v1/transfers/1?a=b", 1},
		{"/v1/transfers/a%2Fb", -1}, // r.URL.Path would be "/v1/transfers/a/b"
		{"/v1/transfers/a%20b", 1},
		{"/v1/%74ransfers/1", 1},
		{"http://example.com/v1/transfers/1", 1}, // absolute-form target, path extracted
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", tt.target, nil)
		m, ok := tab.Match(r.Method, r.URL.EscapedPath())
		got := -1
		if ok {
			got = m.Index
		}
		if got != tt.want {
			t.Errorf("target %q (escaped path %q): got %d, want %d", tt.target, r.URL.EscapedPath(), got, tt.want)
		}
	}
}

func TestMatchEmptyTable(t *testing.T) {
	var zero Table
	if _, ok := zero.Match("GET", "/"); ok {
		t.Error("zero Table matched")
	}
	var nilTab *Table
	if _, ok := nilTab.Match("GET", "/"); ok {
		t.Error("nil Table matched")
	}
	tab := mustTable(t, nil)
	if _, ok := tab.Match("GET", "/"); ok {
		t.Error("empty Table matched")
	}
}

// TestMatchLowestIndexAcrossBranches builds tables where the literal and
// parameter branches both complete, in both declaration orders.
func TestMatchLowestIndexAcrossBranches(t *testing.T) {
	lit := Spec{Name: "lit", Method: "GET", Path: "/a/b/c"}
	par := Spec{Name: "par", Method: "GET", Path: "/a/{x}/c"}
	all := Spec{Name: "all", Method: "GET", Path: "/a/{x...}"}
	tests := []struct {
		specs []Spec
		want  string
	}{
		{[]Spec{lit, par, all}, "lit"},
		{[]Spec{par, lit, all}, "par"},
		{[]Spec{all, par, lit}, "all"},
		{[]Spec{lit, all, par}, "lit"},
		{[]Spec{par, all, lit}, "par"},
	}
	for _, tt := range tests {
		tab := mustTable(t, tt.specs)
		m, ok := tab.Match("GET", "/a/b/c")
		if !ok || m.Name != tt.want {
			t.Errorf("order %v: got %q (%v), want %q", names(tt.specs), m.Name, ok, tt.want)
		}
	}
}

func names(specs []Spec) []string {
	var out []string
	for _, s := range specs {
		out = append(out, s.Name)
	}
	return out
}

func TestTableCopiesSpecs(t *testing.T) {
	specs := []Spec{{Name: "a", Method: "GET", Path: "/a"}}
	tab := mustTable(t, specs)
	specs[0].Name = "changed"
	m, ok := tab.Match("GET", "/a")
	if !ok || m.Name != "a" {
		t.Errorf("Match after caller changed specs = %+v, %v; want name a", m, ok)
	}
	if got := tab.Specs(); len(got) != 1 || got[0].Name != "a" {
		t.Errorf("Specs() = %+v", got)
	}
}

func TestMatchAllocs(t *testing.T) {
	tab := mustTable(t, testSpecs)
	for _, p := range []string{"/v1/transfers/1", "/v1/%74ransfers/a%20b", "/v1/files/a/b/c", "/nope/x", "/index.php/v1/accounts/me.json"} {
		allocs := testing.AllocsPerRun(100, func() { tab.Match("GET", p) })
		if allocs != 0 {
			t.Errorf("Match(%q): %v allocations, want 0", p, allocs)
		}
	}
}
