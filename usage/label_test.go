package usage

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestFromRequestLabeled: a label is the index of the value the body (or
// a header) states, compared ASCII case-insensitively, read in the same
// pass as the reservation; anything else is Other, never an error, and
// the body reaches the upstream byte for byte.
func TestFromRequestLabeled(t *testing.T) {
	label := Label{JSON: "model", Values: []string{"gpt-4o", "gpt-4o-mini"}}
	src := RequestSource{JSON: "max_tokens"}
	long := strings.Repeat("x", MaxLabelLen+1)
	cases := []struct {
		name, ctype, body string
		src               RequestSource
		value             int
		units             uint64
	}{
		{"first", "application/json", `{"model":"gpt-4o","max_tokens":7}`, src, 0, 7},
		{"second, another case", "application/json", `{"max_tokens":7,"model":"GPT-4o-Mini"}`, src, 1, 7},
		{"escaped", "application/json", `{"model":"gpt-4o\u002dmini","max_tokens":7}`, src, 1, 7},
		{"label only", "", `{"model":"gpt-4o"}`, RequestSource{}, 0, 0},
		{"unknown", "application/json", `{"model":"gpt-5","max_tokens":7}`, src, Other, 7},
		{"a prefix of a value", "application/json", `{"model":"gpt-4","max_tokens":7}`, src, Other, 7},
		{"not a string", "application/json", `{"model":4,"max_tokens":7}`, src, Other, 7},
		{"null", "application/json", `{"model":null,"max_tokens":7}`, src, Other, 7},
		{"strings after it", "application/json", `{"model":"gpt-4o","messages":[{"role":"user","content":"x"}],"max_tokens":7}`, src, 0, 7},
		{"nested elsewhere", "application/json", `{"x":{"model":"gpt-4o"},"max_tokens":7}`, src, Other, 7},
		{"too long", "application/json", `{"model":"` + long + `","max_tokens":7}`, src, Other, 7},
		{"repeated", "application/json", `{"model":"gpt-4o","model":"gpt-4o-mini","max_tokens":7}`, src, Other, 7},
		{"case twin", "application/json", `{"model":"gpt-4o","Model":"gpt-4o-mini","max_tokens":7}`, src, Other, 7},
		{"not JSON", "application/json", `model=gpt-4o`, src, Other, 0},
		{"a form", "application/x-www-form-urlencoded", `{"model":"gpt-4o"}`, src, Other, 0},
	}
	for _, c := range cases {
		r, _ := http.NewRequest("POST", "/", strings.NewReader(c.body))
		if c.ctype != "" {
			r.Header.Set("Content-Type", c.ctype)
		}
		units, _, value, _, err := FromRequestLabeled(r, c.src, label, 0, nil)
		if err != nil || value != c.value || units != c.units {
			t.Errorf("%s: value %d, units %d, err %v; want value %d, units %d", c.name, value, units, err, c.value, c.units)
		}
		if b, _ := io.ReadAll(r.Body); string(b) != c.body {
			t.Errorf("%s: body forwarded as %q", c.name, b)
		}
	}

	h := Label{Header: "X-Model", Values: []string{"a", "b"}}
	for _, c := range []struct {
		vals  []string
		value int
	}{{[]string{"B"}, 1}, {nil, Other}, {[]string{"c"}, Other}, {[]string{"a", "b"}, Other}} {
		r, _ := http.NewRequest("GET", "/", nil)
		for _, v := range c.vals {
			r.Header.Add("X-Model", v)
		}
		if _, _, value, _, _ := FromRequestLabeled(r, RequestSource{}, h, 0, nil); value != c.value {
			t.Errorf("header %q: value %d, want %d", c.vals, value, c.value)
		}
	}
}
