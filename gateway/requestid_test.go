package gateway

import (
	"net/http"
	"strings"
	"testing"
)

func TestSetRequestID(t *testing.T) {
	cases := []struct {
		name string
		in   []string // the request's X-Request-Id values
		keep bool
	}{
		{"none", nil, false},
		{"kept", []string{"abc-123:x.y_z"}, true},
		{"unsafe character", []string{"abc 123"}, false},
		{"too long", []string{strings.Repeat("a", 129)}, false},
		{"sent twice: kept, set once", []string{"abc", "abc"}, true},
		{"sent twice, differing: the first kept, set once", []string{"abc", "other"}, true},
		{"sent twice, the first unsafe: replaced", []string{"a b", "abc"}, false},
	}
	for _, c := range cases {
		req, resp := http.Header{}, http.Header{}
		if c.in != nil {
			req["X-Request-Id"] = c.in
		}
		st := &requestState{}
		setRequestID(req, resp, st)
		if c.keep && st.requestID != c.in[0] || !c.keep && (st.requestID == "" || c.in != nil && st.requestID == c.in[0]) {
			t.Errorf("%s: id %q from %q", c.name, st.requestID, c.in)
		}
		if got := req["X-Request-Id"]; len(got) != 1 || got[0] != st.requestID {
			t.Errorf("%s: request header %q, want [%q]", c.name, got, st.requestID)
		}
		if got := resp["X-Request-Id"]; len(got) != 1 || got[0] != st.requestID {
			t.Errorf("%s: response header %q, want [%q]", c.name, got, st.requestID)
		}
		// An upstream's own X-Request-Id added to the response leaves the
		// request's header as it was.
		resp.Add("X-Request-Id", "upstream")
		if got := req["X-Request-Id"]; len(got) != 1 || got[0] != st.requestID {
			t.Errorf("%s: request header changed to %q by an Add to the response", c.name, got)
		}
	}
}

// A new id costs its string only (the two headers' array is the request
// state's); a kept one costs nothing.
func TestSetRequestIDAllocs(t *testing.T) {
	st := &requestState{}
	fresh := testing.AllocsPerRun(100, func() { setRequestID(http.Header{}, http.Header{}, st) })
	base := testing.AllocsPerRun(100, func() { _, _ = http.Header{}, http.Header{} })
	if n := fresh - base; n > 1 {
		t.Errorf("new id: %v allocations, want at most 1", n)
	}
	req, resp := http.Header{"X-Request-Id": {"abc"}}, http.Header{}
	if n := testing.AllocsPerRun(100, func() { setRequestID(req, resp, st) }); n > 0 {
		t.Errorf("kept id: %v allocations, want 0", n)
	}
}
