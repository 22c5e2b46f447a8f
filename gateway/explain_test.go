package gateway

import (
	"strings"
	"testing"

	"github.com/quotagate/quotagate/config"
)

// TestExplainRejectsMalformedRequests: a method or path that no client
// could send is an error naming what is wrong, never a panic.
func TestExplainRejectsMalformedRequests(t *testing.T) {
	cfg, err := config.Load("../config.yaml", func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ method, path, want string }{
		{"GE T", "/x", "method"},
		{"", "/x", "method: empty"},
		{"GET\r\n", "/x", "method"},
		{"GÉT", "/x", "method"},
		{"GET", "", "must start with /"},
		{"GET", "x", "must start with /"},
		{"GET", "http://h/v1/transfers/1", "must start with /"},
		{"GET", "/a b", "whitespace"},
		{"GET", "/a\tb", "whitespace"},
		{"GET", "/\x01", "control character"},
		{"GET", "/%zz", "escape"},
		{"GET", "/v1/transfers/1\x7f", "control character"},
	} {
		ex, err := Explain(cfg, tc.method, tc.path, "", nil)
		if err == nil {
			t.Errorf("Explain(%q, %q) = %+v, want an error", tc.method, tc.path, ex)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Explain(%q, %q): %v, want it to mention %q", tc.method, tc.path, err, tc.want)
		}
	}
	// Neighbours that are well-formed still explain.
	for _, tc := range []struct{ method, path, route string }{
		{"GET", "/v1/transfers/42?x=1", "transfers.get"},
		{"GET", "/v1/%74ransfers/42", "transfers.get"},
		{"GET", "/anything/else", "other.get"},
	} {
		ex, err := Explain(cfg, tc.method, tc.path, "", nil)
		if err != nil {
			t.Errorf("Explain(%q, %q): %v", tc.method, tc.path, err)
			continue
		}
		if ex.Route != tc.route {
			t.Errorf("Explain(%q, %q) route %q, want %q", tc.method, tc.path, ex.Route, tc.route)
		}
	}
}
