package usage

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestFromRequest(t *testing.T) {
	src := RequestSource{JSON: "max_tokens", Header: "X-Max-Tokens"}
	for _, tc := range []struct {
		name    string
		body    string
		header  string // X-Max-Tokens, "-" for none
		ce      string
		units   uint64
		found   bool
		badJSON bool // err wraps ErrMalformed
	}{
		{"json", `{"model":"m","max_tokens":500}`, "-", "", 500, true, false},
		{"json before header", `{"max_tokens":500}`, "700", "", 500, true, false},
		// Bodies that decoders read different values from state nothing:
		// a first-wins decoder reads 30000 here, Go's encoding/json the
		// key in another case, a stream decoder the second value.
		{"json key twice", `{"max_tokens":30000,"max_tokens":1}`, "700", "", 0, false, false},
		{"json key in another case", `{"max_tokens":1,"Max_Tokens":30000}`, "-", "", 0, false, false},
		{"json key twice, once escaped", `{"max_tokens":1,"max\u005ftokens":30000}`, "-", "", 0, false, false},
		{"json key twice, both escaped", `{"m\u0061x_tokens":30000,"max_tok\u0065ns":1}`, "-", "", 0, false, false},
		{"json key escaped, once", `{"max\u005Ftokens":30}`, "-", "", 30, true, false},
		{"json key with a Kelvin sign", `{"max_to\u212Aens":30000,"max_tokens":1}`, "-", "", 0, false, false},
		{"json key folded, not on the path", `{"MAX_TOKENS":30000}`, "-", "", 0, false, false},
		{"json second value", `{"max_tokens":1} {"max_tokens":30000}`, "-", "", 0, false, false},
		{"json whitespace after", "{\"max_tokens\":7}\r\n ", "-", "", 7, true, false},
		{"json other keys in another case", `{"Model":"m","model":"n","max_tokens":9}`, "-", "", 9, true, false},
		{"json same key nested off the path", `{"max_tokens":9,"x":{"max_tokens":1,"MAX_TOKENS":2}}`, "-", "", 9, true, false},
		// A body that does not state the field readably states nothing:
		// the header, which could claim less than the body asks the
		// upstream for, is not read.
		{"no header when json absent", `{"model":"m"}`, "700", "", 0, false, false},
		{"no header when json null", `{"max_tokens":null}`, "700", "", 0, false, false},
		{"no header when body not json", `max_tokens=5`, "700", "", 0, false, false},
		{"no header when body truncated", `{"max_tokens":5`, "700", "", 0, false, false},
		{"no header when gzip", `{"max_tokens":5}`, "700", "gzip", 0, false, false},
		{"gzip, even with a readable body", `{"max_tokens":5}`, "-", "gzip", 0, false, false},
		{"neither", `{}`, "-", "", 0, false, false},
		{"empty body", ``, "-", "", 0, false, false},
		{"header when no body", ``, "700", "", 700, true, false},
		{"zero", `{"max_tokens":0}`, "-", "", 0, true, false},
		{"json negative", `{"max_tokens":-5}`, "700", "", 0, false, true},
		{"json string", `{"max_tokens":"5"}`, "700", "", 0, false, true},
		{"json fraction", `{"max_tokens":5.5}`, "-", "", 0, false, true},
		{"json too large", `{"max_tokens":9007199254740993}`, "-", "", 0, false, true},
		{"json object", `{"max_tokens":{}}`, "-", "", 0, false, true},
		// Numbers a lenient decoder reads as a whole count, or as another
		// one, are not one: an exponent (1e9 is 10^9 to many decoders),
		// a zero fraction, a negative zero, a number past 2^53 (rounded
		// by float decoders), a string of digits.
		{"json exponent", `{"max_tokens":1e9}`, "1", "", 0, false, true},
		{"json exponent, capital", `{"max_tokens":4E2}`, "-", "", 0, false, true},
		{"json zero fraction", `{"max_tokens":1.0}`, "-", "", 0, false, true},
		{"json negative zero", `{"max_tokens":-0}`, "-", "", 0, false, true},
		{"json far too large", `{"max_tokens":100000000000000000000000}`, "-", "", 0, false, true},
		{"json escaped digits", `{"max_tokens":"\u0035"}`, "-", "", 0, false, true},
		// Bodies that are not JSON (a leading zero, a byte-order mark,
		// a trailing comma) state nothing, whatever the header says:
		// a lenient upstream may still read a value from them.
		{"json leading zero", `{"max_tokens":0400}`, "1", "", 0, false, false},
		{"json byte-order mark", "\ufeff{\"max_tokens\":400}", "1", "", 0, false, false},
		{"json trailing comma", `{"max_tokens":400,}`, "1", "", 0, false, false},
		{"json spaces around the value", "{ \"max_tokens\" :\t400 \n}", "1", "", 400, true, false},
		{"header malformed", ``, "5x", "", 0, false, true},
		{"header empty", ``, "", "", 0, false, true},
		{"header negative", ``, "-1", "", 0, false, true},
		// Repeated, the upstream may read the last or both: "1|40000" is
		// two X-Max-Tokens lines.
		{"header twice", ``, "1|40000", "", 0, false, true},
		{"header twice, same value", ``, "5|5", "", 0, false, true},
		{"header malformed, not read with a body", `{}`, "5x", "", 0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", "http://x/", strings.NewReader(tc.body))
			if tc.header != "-" {
				req.Header["X-Max-Tokens"] = strings.Split(tc.header, "|")
			}
			if tc.ce != "" {
				req.Header.Set("Content-Encoding", tc.ce)
			}
			cl := req.ContentLength
			n, found, err := FromRequest(req, src, 0)
			if tc.badJSON != errors.Is(err, ErrMalformed) || (!tc.badJSON && err != nil) {
				t.Fatalf("err = %v, want malformed %v", err, tc.badJSON)
			}
			if n != tc.units || found != tc.found {
				t.Errorf("got %d, %v; want %d, %v", n, found, tc.units, tc.found)
			}
			body, err := io.ReadAll(req.Body)
			if err != nil || string(body) != tc.body || req.ContentLength != cl {
				t.Errorf("body after = %q (%v), length %d; want %q, %d", body, err, req.ContentLength, tc.body, cl)
			}
		})
	}
}

// TestFromRequestKeepsBody: whatever is read ahead, the upstream gets the
// body byte for byte, also past the prefix and in pieces.
func TestFromRequestKeepsBody(t *testing.T) {
	src := RequestSource{JSON: "max_tokens"}
	long := `{"messages":"` + strings.Repeat("y", 300<<10) + `","max_tokens":64}` + "\n"
	for _, tc := range []struct {
		name      string
		body      string
		maxPrefix int64
		found     bool
	}{
		{"within the prefix", long, 0, true},
		{"beyond the prefix", long, 1000, false},
		{"value then whitespace", `{"max_tokens":64}` + strings.Repeat(" ", 10000), 0, true},
		// Read in pieces, the second value comes after the first was
		// complete: the body is still not one value.
		{"value then more bytes", `{"max_tokens":64}` + strings.Repeat(" ", 10000) + "trailing", 0, false},
		{"value then a second value", `{"max_tokens":64}` + strings.Repeat("\n", 1000) + `{"max_tokens":90000}`, 0, false},
		{"value then whitespace past the prefix", `{"max_tokens":64}` + strings.Repeat(" ", 2000), 1000, false},
		{"value then whitespace to the prefix", `{"max_tokens":64}` + strings.Repeat(" ", 1000-17), 1000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := &chunks{parts: splitEvery(tc.body, 777)}
			req, _ := http.NewRequest("POST", "http://x/", io.NopCloser(up))
			req.ContentLength = -1
			n, found, err := FromRequest(req, src, tc.maxPrefix)
			if err != nil || found != tc.found || (found && n != 64) {
				t.Fatalf("got %d, %v, %v; want found %v", n, found, err, tc.found)
			}
			body, err := io.ReadAll(req.Body)
			if err != nil || !bytes.Equal(body, []byte(tc.body)) {
				t.Fatalf("body after: %d bytes, %v; want %d bytes", len(body), err, len(tc.body))
			}
			if req.ContentLength != -1 {
				t.Errorf("ContentLength = %d, want -1 unchanged", req.ContentLength)
			}
		})
	}
}

func TestFromRequestReadError(t *testing.T) {
	broken := &http.MaxBytesError{Limit: 10}
	req, _ := http.NewRequest("POST", "http://x/", io.NopCloser(&chunks{parts: []string{`{"max_tokens":`}, err: broken}))
	_, found, err := FromRequest(req, RequestSource{JSON: "max_tokens", Header: "X"}, 0)
	if _, ok := errors.AsType[*http.MaxBytesError](err); !ok || found || errors.Is(err, ErrMalformed) {
		t.Errorf("got found %v, err %v; want the read error", found, err)
	}
}

func splitEvery(s string, n int) []string {
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	return append(out, s)
}

// TestFromRequestNestedAmbiguous: on a nested path, a repeated or
// case-folded key at any level of the path states nothing; the same keys
// off the path do not matter.
func TestFromRequestNestedAmbiguous(t *testing.T) {
	src := RequestSource{JSON: "params.max_tokens"}
	for _, tc := range []struct {
		body  string
		units uint64
		found bool
	}{
		{`{"params":{"max_tokens":5}}`, 5, true},
		{`{"params":{"max_tokens":5},"Params":{"max_tokens":900}}`, 0, false},
		{`{"params":{"max_tokens":5},"params":{"max_tokens":900}}`, 0, false},
		{`{"params":{"max_tokens":5,"MAX_TOKENS":900}}`, 0, false},
		{`{"params":{"max_tokens":5},"other":{"max_tokens":1,"MAX_TOKENS":2},"MAX_TOKENS":3}`, 5, true},
		{`{"params":[{"max_tokens":5}],"params":{"max_tokens":6}}`, 0, false},
	} {
		req, _ := http.NewRequest("POST", "http://x/", strings.NewReader(tc.body))
		n, found, err := FromRequest(req, src, 0)
		if err != nil || n != tc.units || found != tc.found {
			t.Errorf("%s: got %d, %v, %v; want %d, %v", tc.body, n, found, err, tc.units, tc.found)
		}
	}
}

// TestFromRequestHeaderAsForwarded: the header is read as the upstream
// receives it: every spelling CGI, WSGI and Rack take for it counts (and
// two are a repeat), and one the request names in Connection, which the
// proxy removes, states nothing.
func TestFromRequestHeaderAsForwarded(t *testing.T) {
	src := RequestSource{Header: "X-Max-Tokens"}
	for _, tc := range []struct {
		name      string
		hdr       map[string][]string
		units     uint64
		found     bool
		malformed bool
	}{
		{"underscores", map[string][]string{"X_max_tokens": {"40"}}, 40, true, false},
		{"both spellings", map[string][]string{"X-Max-Tokens": {"1"}, "X_max_tokens": {"400"}}, 0, false, true},
		{"named in Connection", map[string][]string{"X-Max-Tokens": {"1"}, "Connection": {"keep-alive, x-max-tokens"}}, 0, false, false},
		{"the other spelling named in Connection", map[string][]string{"X-Max-Tokens": {"1"}, "X_max_tokens": {"400"}, "Connection": {"X_Max_Tokens"}}, 1, true, false},
		{"another header named in Connection", map[string][]string{"X-Max-Tokens": {"7"}, "Connection": {"X-Max-Token, X-Max-Tokens-2"}}, 7, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", "http://x/", http.NoBody)
			for k, v := range tc.hdr {
				req.Header[k] = v
			}
			n, found, err := FromRequest(req, src, 0)
			if tc.malformed != errors.Is(err, ErrMalformed) || (!tc.malformed && err != nil) {
				t.Fatalf("err = %v, want malformed %v", err, tc.malformed)
			}
			if n != tc.units || found != tc.found {
				t.Errorf("got %d, %v; want %d, %v", n, found, tc.units, tc.found)
			}
		})
	}
}

// TestFromRequestAliasesAndCount: a body may state the limit in a field
// the upstream takes for the same one (vLLM reads max_completion_tokens
// before max_tokens): the largest stated value is reserved, times the
// count field (n completions, each up to max_tokens) when stated. A value
// that is not a usage in any of them is malformed, and a field stated
// ambiguously states nothing, whatever the others say.
func TestFromRequestAliasesAndCount(t *testing.T) {
	src := RequestSource{JSON: "max_tokens", JSONAliases: []string{"max_completion_tokens"}, JSONCount: "n"}
	for _, tc := range []struct {
		name, body string
		units      uint64
		found      bool
		malformed  bool
	}{
		{"first only", `{"max_tokens":30}`, 30, true, false},
		{"alias only", `{"max_completion_tokens":40}`, 40, true, false},
		{"alias larger", `{"max_tokens":1,"max_completion_tokens":40000}`, 40000, true, false},
		{"first larger", `{"max_completion_tokens":1,"max_tokens":400}`, 400, true, false},
		{"alias null", `{"max_tokens":7,"max_completion_tokens":null}`, 7, true, false},
		{"alias malformed", `{"max_tokens":7,"max_completion_tokens":"40000"}`, 0, false, true},
		{"alias twice", `{"max_tokens":1,"max_completion_tokens":1,"max_completion_tokens":40000}`, 0, false, false},
		{"alias in another case", `{"max_tokens":1,"Max_Completion_Tokens":40000}`, 0, false, false},
		{"neither", `{"model":"m"}`, 0, false, false},
		{"count", `{"max_tokens":30,"n":4}`, 120, true, false},
		{"count first, alias larger", `{"n":3,"max_tokens":1,"max_completion_tokens":50}`, 150, true, false},
		{"count 0", `{"max_tokens":30,"n":0}`, 30, true, false},
		{"count null", `{"max_tokens":30,"n":null}`, 30, true, false},
		{"count past 2^53", `{"max_tokens":9007199254740992,"n":2}`, MaxUnits, true, false},
		{"count alone", `{"n":4}`, 0, false, false},
		{"count malformed", `{"max_tokens":30,"n":"4"}`, 0, false, true},
		{"count twice", `{"max_tokens":30,"n":1,"n":400}`, 0, false, false},
		{"count in another case", `{"max_tokens":30,"n":1,"N":400}`, 0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", "http://x/", strings.NewReader(tc.body))
			n, found, err := FromRequest(req, src, 0)
			if tc.malformed != errors.Is(err, ErrMalformed) || (!tc.malformed && err != nil) {
				t.Fatalf("err = %v, want malformed %v", err, tc.malformed)
			}
			if tc.malformed && !strings.Contains(err.Error(), "max_completion_tokens") && !strings.Contains(err.Error(), "field n:") {
				t.Errorf("err = %v, want it to name the field", err)
			}
			if n != tc.units || found != tc.found {
				t.Errorf("got %d, %v; want %d, %v", n, found, tc.units, tc.found)
			}
		})
	}
	if err := (RequestSource{JSON: "a", JSONAliases: []string{"b..c", ""}}).Validate(); err == nil ||
		!strings.Contains(err.Error(), "json_aliases[0]") || !strings.Contains(err.Error(), "json_aliases[1]") {
		t.Errorf("Validate of bad aliases = %v, want both named", err)
	}
}
