package usage

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestJSONType: which Content-Types reserve_from.json reads.
func TestJSONType(t *testing.T) {
	for ct, want := range map[string]bool{
		"":                                  true, // absent
		"application/json":                  true,
		"Application/JSON; charset=utf-8":   true,
		" application/json ;x=y":            true,
		"application/vnd.api+json":          true,
		"application/problem+JSON":          true,
		"application/x-www-form-urlencoded": false,
		"multipart/form-data; boundary=b":   false,
		"text/plain":                        false,
		"text/json":                         false,
		"application/":                      false,
		"application/+json":                 false,
		"application/a/b+json":              false,
		"applicationjson":                   false,
	} {
		h := http.Header{}
		if ct != "" {
			h.Set("Content-Type", ct)
		}
		if got := jsonType(h); got != want {
			t.Errorf("Content-Type %q: jsonType %v, want %v", ct, got, want)
		}
	}
	twice := http.Header{"Content-Type": {"application/json", "application/json"}}
	if jsonType(twice) {
		t.Error("a Content-Type stated twice counts as JSON")
	}
	spelled := http.Header{"Content-Type": {"application/json"}, "Content_type": {"text/plain"}}
	if jsonType(spelled) {
		t.Error("a Content-Type stated in two spellings counts as JSON")
	}
}

// TestFromRequestWithinBudget: a body whose prefix does not fit the budget
// is not read further (ErrOverBudget, nothing found) and is still whole for
// the upstream; what was taken is reported as held and, given back,
// restores the budget. A form body states nothing and takes nothing.
func TestFromRequestWithinBudget(t *testing.T) {
	body := `{"max_tokens":7,"pad":"` + strings.Repeat("p", 200<<10) + `"}`
	src := RequestSource{JSON: "max_tokens"}
	b := NewBudget(100 << 10)
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
	units, found, held, err := FromRequestWithin(r, src, 1<<20, b)
	if !errors.Is(err, ErrOverBudget) || found || units != 0 {
		t.Fatalf("over budget: %d %v %v, want ErrOverBudget and nothing found", units, found, err)
	}
	if held <= 0 || held > 100<<10 || b.Left() != 100<<10-held {
		t.Errorf("held %d with %d left of 100 KiB", held, b.Left())
	}
	if got, _ := io.ReadAll(r.Body); string(got) != body {
		t.Errorf("the body after an over-budget read is %d bytes, want the whole %d", len(got), len(body))
	}
	b.Give(held)
	if b.Left() != 100<<10 {
		t.Errorf("after giving back: %d left", b.Left())
	}

	big := NewBudget(1 << 20)
	r = httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
	units, found, held, err = FromRequestWithin(r, src, 1<<20, big)
	if err != nil || !found || units != 7 || held < int64(len(body)) || big.Left() != 1<<20-held {
		t.Errorf("within budget: %d %v held %d err %v, left %d", units, found, held, err, big.Left())
	}

	r = httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"max_tokens":1}`))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if units, found, held, err := FromRequestWithin(r, src, 1<<20, NewBudget(0)); found || held != 0 || err != nil || units != 0 {
		t.Errorf("a form body: %d %v held %d err %v, want nothing read", units, found, held, err)
	}
}
