package usage

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// chunks is a body that returns its pieces one per Read.
type chunks struct {
	parts  []string
	err    error // returned after the parts; io.EOF when nil
	closed bool
}

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.parts) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		return 0, io.EOF
	}
	n := copy(p, c.parts[0])
	c.parts[0] = c.parts[0][n:]
	if c.parts[0] == "" {
		c.parts = c.parts[1:]
	}
	return n, nil
}

func (c *chunks) Close() error { c.closed = true; return nil }

// watchAll watches a response with header h and a body of parts, reads it
// to the end through the watched body, checks that every byte passed
// unchanged, and returns what done got.
func watchAll(t *testing.T, h http.Header, parts []string, src Source, maxPrefix int64) Result {
	t.Helper()
	if h == nil {
		h = http.Header{}
	}
	want := strings.Join(parts, "")
	resp := &http.Response{Header: h, Body: &chunks{parts: append([]string(nil), parts...)}}
	var got []Result
	Watch(resp, src, maxPrefix, func(r Result) { got = append(got, r) })
	body, err := io.ReadAll(resp.Body)
	if err != nil || string(body) != want {
		t.Fatalf("body = %q, %v; want %q", body, err, want)
	}
	resp.Body.Close()
	if len(got) != 1 {
		t.Fatalf("done called %d times, want 1", len(got))
	}
	return got[0]
}

// splits returns body cut into pieces of every size from 1 to len(body),
// plus the whole body, so that every token is split across Reads somewhere.
func splits(body string) [][]string {
	out := [][]string{{body}}
	for size := 1; size < len(body) && size <= 7; size++ {
		var parts []string
		for i := 0; i < len(body); i += size {
			parts = append(parts, body[i:min(i+size, len(body))])
		}
		out = append(out, parts)
	}
	return out
}

// watchSplits checks that every way splits cuts body gives want.
func watchSplits(t *testing.T, h http.Header, body string, src Source, want Result) {
	t.Helper()
	for _, parts := range splits(body) {
		if r := watchAll(t, h, parts, src, 0); r != want {
			t.Fatalf("parts %q: got %+v, want %+v", parts, r, want)
		}
	}
}

// bodyCase is a body and the usage it holds.
type bodyCase struct {
	name  string
	body  string
	units uint64
	found bool
}

var jsonHeader = http.Header{"Content-Type": {"application/json"}}

func TestWatchJSON(t *testing.T) {
	const path = "usage.total_tokens"
	for _, tc := range []bodyCase{
		{"plain", `{"usage":{"total_tokens":42}}`, 42, true},
		{"zero", `{"usage":{"total_tokens":0}}`, 0, true},
		{"2^53", `{"usage":{"total_tokens":9007199254740992}}`, 1 << 53, true},
		{"above 2^53", `{"usage":{"total_tokens":9007199254740993}}`, 0, false},
		{"far above", `{"usage":{"total_tokens":123456789012345678901234567890}}`, 0, false},
		{"negative", `{"usage":{"total_tokens":-1}}`, 0, false},
		{"minus zero", `{"usage":{"total_tokens":-0}}`, 0, false},
		{"fraction", `{"usage":{"total_tokens":1.0}}`, 0, false},
		{"exponent", `{"usage":{"total_tokens":1e3}}`, 0, false},
		{"string", `{"usage":{"total_tokens":"42"}}`, 0, false},
		{"null", `{"usage":{"total_tokens":null}}`, 0, false},
		{"true", `{"usage":{"total_tokens":true}}`, 0, false},
		{"object", `{"usage":{"total_tokens":{"n":1}}}`, 0, false},
		{"array", `{"usage":{"total_tokens":[1]}}`, 0, false},
		{"absent", `{"usage":{"prompt_tokens":5}}`, 0, false},
		{"wrong level", `{"total_tokens":5,"x":{"usage":{"total_tokens":1}}}`, 0, false},
		{"usage not object", `{"usage":[{"total_tokens":5}]}`, 0, false},
		{"top-level array", `[{"usage":{"total_tokens":5}}]`, 0, false},
		{"among others", `{"id":"x","choices":[{"a":{"usage":{"total_tokens":9}}}],"usage":{"prompt_tokens":3,"total_tokens":17,"completion_tokens":14},"z":[1,2.5e-3,true,false,null]}`, 17, true},
		{"whitespace", " \n{ \"usage\" : { \"total_tokens\" : 8 } }\r\n\t", 8, true},
		{"escaped key", `{"\u0075sage":{"total_t\u006Fkens":6}}`, 6, true},
		{"escapes elsewhere", `{"s":"a\"b\\c\/\b\f\n\r\t\u00e9\ud83d\ude00","usage":{"total_tokens":7}}`, 7, true},
		{"key prefix", `{"usage":{"total_tokens_x":5,"total":4}}`, 0, false},
		{"duplicate: last wins", `{"usage":{"total_tokens":5,"total_tokens":6}}`, 6, true},
		{"duplicate parent replaces", `{"usage":{"total_tokens":5},"usage":{}}`, 0, false},
		{"duplicate null replaces", `{"usage":{"total_tokens":5,"total_tokens":null}}`, 0, false},
		{"truncated", `{"usage":{"total_tokens":5}`, 0, false},
		{"trailing garbage", `{"usage":{"total_tokens":5}} x`, 0, false},
		{"two values", `{"usage":{"total_tokens":5}}{}`, 0, false},
		{"leading zero", `{"usage":{"total_tokens":05}}`, 0, false},
		{"control char in string", "{\"a\":\"\x01\",\"usage\":{\"total_tokens\":5}}", 0, false},
		{"bad escape", `{"a":"\x","usage":{"total_tokens":5}}`, 0, false},
		{"bad literal", `{"a":nul,"usage":{"total_tokens":5}}`, 0, false},
		{"mismatched close", `{"usage":{"total_tokens":5]}`, 0, false},
		{"missing comma", `{"a":1 "usage":{"total_tokens":5}}`, 0, false},
		{"trailing comma", `{"usage":{"total_tokens":5},}`, 0, false},
		{"empty", ``, 0, false},
		{"not json", `<html>usage</html>`, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := Result{Units: tc.units, Found: tc.found, Complete: true}
			if tc.found {
				want.From = "json"
			}
			watchSplits(t, jsonHeader, tc.body, Source{JSON: path}, want)
		})
	}
}

func TestWatchJSONPrefixCap(t *testing.T) {
	body := `{"usage":{"total_tokens":5}}`
	if r := watchAll(t, jsonHeader, []string{body}, Source{JSON: "usage.total_tokens"}, int64(len(body))); !r.Found {
		t.Errorf("a body of exactly maxPrefix bytes: %+v, want found", r)
	}
	if r := watchAll(t, jsonHeader, []string{body + " "}, Source{JSON: "usage.total_tokens"}, int64(len(body))); r.Found {
		t.Errorf("a body one byte over maxPrefix: %+v, want not found", r)
	}
	big := `{"pad":"` + strings.Repeat("x", DefaultMaxPrefix) + `","usage":{"total_tokens":5}}`
	if r := watchAll(t, jsonHeader, []string{big}, Source{JSON: "usage.total_tokens"}, 0); r.Found {
		t.Errorf("a body over the default cap: %+v, want not found", r)
	}
}

func TestWatchJSONDepth(t *testing.T) {
	deep := strings.Repeat(`{"a":`, maxDepth) + "1" + strings.Repeat("}", maxDepth)
	r := watchAll(t, nil, []string{`{"usage":{"total_tokens":1},"d":` + deep + "}"}, Source{JSON: "usage.total_tokens"}, 0)
	if r.Found {
		t.Errorf("nesting beyond %d levels: %+v, want not found", maxDepth, r)
	}
	ok := strings.Repeat(`{"a":`, 100) + "1" + strings.Repeat("}", 100)
	r = watchAll(t, nil, []string{`{"d":` + ok + `,"usage":{"total_tokens":3}}`}, Source{JSON: "usage.total_tokens"}, 0)
	if !r.Found || r.Units != 3 {
		t.Errorf("100 levels: %+v, want 3", r)
	}
}

func TestWatchHeaderAndTrailer(t *testing.T) {
	src := Source{Header: "X-Usage", JSON: "n"}
	body := `{"n":7}`
	for _, tc := range []struct {
		name    string
		header  http.Header
		trailer http.Header
		want    Result
	}{
		{"header wins", http.Header{"X-Usage": {"3"}}, http.Header{"X-Usage": {"4"}}, Result{3, true, "header", true, false}},
		{"first value", http.Header{"X-Usage": {"3", "9"}}, nil, Result{3, true, "header", true, false}},
		{"trailer before json", nil, http.Header{"X-Usage": {"4"}}, Result{4, true, "trailer", true, false}},
		{"bad header falls through", http.Header{"X-Usage": {"-3"}}, http.Header{"X-Usage": {"4"}}, Result{4, true, "trailer", true, false}},
		{"bad trailer falls through", nil, http.Header{"X-Usage": {"4.0"}}, Result{7, true, "json", true, false}},
		{"empty header", http.Header{"X-Usage": {""}}, nil, Result{7, true, "json", true, false}},
		{"leading zeros", http.Header{"X-Usage": {"007"}}, nil, Result{7, true, "header", true, false}},
		{"too large", http.Header{"X-Usage": {"9007199254740993"}}, nil, Result{7, true, "json", true, false}},
		{"plus sign", http.Header{"X-Usage": {"+3"}}, nil, Result{7, true, "json", true, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.header.Clone()
			if h == nil {
				h = http.Header{}
			}
			resp := &http.Response{Header: h, Body: &trailerBody{chunks: chunks{parts: []string{body}}, trailer: tc.trailer}}
			resp.Body.(*trailerBody).resp = resp
			var got []Result
			Watch(resp, src, 0, func(r Result) { got = append(got, r) })
			resp.Header.Del("X-Usage") // read at Watch: removing it later changes nothing
			io.ReadAll(resp.Body)
			resp.Body.Close()
			if len(got) != 1 || got[0] != tc.want {
				t.Errorf("got %+v, want one %+v", got, tc.want)
			}
		})
	}
}

// trailerBody sets resp.Trailer when it reaches EOF, as net/http does.
type trailerBody struct {
	chunks
	trailer http.Header
	resp    *http.Response
}

func (b *trailerBody) Read(p []byte) (int, error) {
	n, err := b.chunks.Read(p)
	if err == io.EOF {
		b.resp.Trailer = b.trailer
	}
	return n, err
}

func TestWatchEndings(t *testing.T) {
	src := Source{JSON: "n", SSE: "n"}
	t.Run("error", func(t *testing.T) {
		broken := errors.New("connection reset")
		resp := &http.Response{Header: http.Header{}, Body: &chunks{parts: []string{`{"n":1}`}, err: broken}}
		var got []Result
		Watch(resp, src, 0, func(r Result) { got = append(got, r) })
		if _, err := io.ReadAll(resp.Body); err != broken {
			t.Errorf("read error %v, want the upstream's", err)
		}
		resp.Body.Close()
		// the JSON value had ended: found, but not complete
		if len(got) != 1 || got[0] != (Result{1, true, "json", false, false}) {
			t.Errorf("got %+v", got)
		}
	})
	t.Run("close before the end", func(t *testing.T) {
		up := &chunks{parts: []string{"data: {\"n\":1}\n\n", "data: {\"n\":2}\n\n"}}
		resp := &http.Response{Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: up}
		var got []Result
		Watch(resp, src, 0, func(r Result) { got = append(got, r) })
		buf := make([]byte, 64)
		resp.Body.Read(buf)
		resp.Body.Close()
		resp.Body.Close()
		if !up.closed {
			t.Error("the upstream body was not closed")
		}
		// closed by its reader, not broken off by the upstream: abandoned
		if len(got) != 1 || got[0] != (Result{1, true, "sse", false, true}) {
			t.Errorf("got %+v", got)
		}
	})
	t.Run("json closed mid-value", func(t *testing.T) {
		resp := &http.Response{Header: http.Header{}, Body: &chunks{parts: []string{`{"n":1`, `2}`}}}
		var got []Result
		Watch(resp, src, 0, func(r Result) { got = append(got, r) })
		buf := make([]byte, 64)
		resp.Body.Read(buf)
		resp.Body.Close()
		if len(got) != 1 || got[0] != (Result{Abandoned: true}) {
			t.Errorf("got %+v, want nothing found, abandoned", got)
		}
	})
	t.Run("nil and empty body", func(t *testing.T) {
		resp := &http.Response{Header: http.Header{"X-U": {"5"}}}
		var got []Result
		Watch(resp, Source{Header: "X-U"}, 0, func(r Result) { got = append(got, r) })
		if n, err := resp.Body.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Errorf("Read = %d, %v", n, err)
		}
		if len(got) != 1 || got[0] != (Result{5, true, "header", true, false}) {
			t.Errorf("got %+v", got)
		}
	})
	t.Run("done may close the body", func(t *testing.T) {
		resp := &http.Response{Header: http.Header{}, Body: &chunks{}}
		calls := 0
		Watch(resp, src, 0, func(Result) { calls++; resp.Body.Close() })
		io.ReadAll(resp.Body)
		if calls != 1 {
			t.Errorf("done called %d times", calls)
		}
	})
}

func TestWatchContentEncoding(t *testing.T) {
	for _, ce := range []string{"gzip", "br", "identity, gzip"} {
		h := http.Header{"Content-Encoding": {ce}}
		if r := watchAll(t, h, []string{`{"n":1}`}, Source{JSON: "n"}, 0); r.Found {
			t.Errorf("Content-Encoding %q: %+v, want the body not parsed", ce, r)
		}
	}
	h := http.Header{"Content-Encoding": {"identity"}}
	if r := watchAll(t, h, []string{`{"n":1}`}, Source{JSON: "n"}, 0); !r.Found {
		t.Errorf("Content-Encoding identity: %+v, want found", r)
	}
	h = http.Header{"Content-Encoding": {"gzip"}, "X-U": {"2"}}
	if r := watchAll(t, h, []string{`junk`}, Source{Header: "X-U", JSON: "n"}, 0); r != (Result{2, true, "header", true, false}) {
		t.Errorf("gzip with a usage header: %+v, want the header", r)
	}
}

func TestSourceValidate(t *testing.T) {
	if err := (Source{Header: "X-Usage", JSON: "usage.total_tokens", SSE: "a"}).Validate(); err != nil {
		t.Errorf("valid source: %v", err)
	}
	if err := (Source{}).Validate(); err != nil {
		t.Errorf("empty source: %v", err)
	}
	for _, tc := range []struct {
		src  Source
		want string
	}{
		{Source{Header: "X Usage"}, "header:"},
		{Source{JSON: "usage..total"}, "json:"},
		{Source{SSE: ".a"}, "sse:"},
		{Source{JSON: strings.Repeat("a.", MaxSegments) + "a"}, "json:"},
	} {
		err := tc.src.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error starting %q", tc.src, err, tc.want)
		}
	}
	if err := (RequestSource{Header: "X:Y", JSON: "a."}).Validate(); err == nil ||
		!strings.Contains(err.Error(), "header:") || !strings.Contains(err.Error(), "json:") {
		t.Errorf("RequestSource: %v, want both fields named", err)
	}
}

// TestWatchCloseWhileReading: a client that goes away closes the body
// while another goroutine reads it (run with -race); done is still called
// once.
func TestWatchCloseWhileReading(t *testing.T) {
	for range 20 {
		pr, pw := io.Pipe()
		resp := &http.Response{Header: sseHeader.Clone(), Body: pr}
		calls := make(chan Result, 2)
		Watch(resp, Source{SSE: "n"}, 0, func(r Result) { calls <- r })
		go func() {
			for {
				if _, err := pw.Write([]byte("data: {\"n\":1}\n\n")); err != nil {
					return
				}
			}
		}()
		readDone := make(chan struct{})
		go func() {
			defer close(readDone)
			buf := make([]byte, 7)
			for {
				if _, err := resp.Body.Read(buf); err != nil {
					return
				}
			}
		}()
		resp.Body.Close()
		<-readDone
		if len(calls) != 1 {
			t.Fatalf("done called %d times", len(calls))
		}
		if r := <-calls; r.Complete {
			t.Errorf("result %+v after Close, want Complete false", r)
		}
	}
}
