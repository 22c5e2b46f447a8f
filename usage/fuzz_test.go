package usage

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// refJSON is the reference answer for a JSON body: encoding/json decodes
// it, and the value at path must be a json.Number of digits only, at most
// MaxUnits.
func refJSON(body []byte, path string) (uint64, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return 0, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return 0, false // more than one value
	}
	for key := range strings.SplitSeq(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return 0, false
		}
		if v, ok = m[key]; !ok {
			return 0, false
		}
	}
	num, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	return parseUnits(string(num))
}

// refRequest is refJSON for a request body and a path of one key: no
// value when the top-level object holds the key more than once, or holds
// a key equal to it only under case folding (see FromRequest).
func refRequest(body []byte, key string) (uint64, bool) {
	n, ok := refJSON(body, key)
	if !ok {
		return 0, false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return 0, false
	}
	hits := 0
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return 0, false
		}
		if k, _ := t.(string); strings.EqualFold(k, key) {
			if hits++; k != key {
				return 0, false
			}
		}
		var raw json.RawMessage
		if dec.Decode(&raw) != nil {
			return 0, false
		}
	}
	return n, hits == 1
}

// fuzzPieces cuts b at positions derived from seed, so that tokens are
// split across Reads at places the fuzzer chooses.
func fuzzPieces(b []byte, seed uint64) []string {
	var out []string
	for len(b) > 0 {
		n := int(seed%7) + 1
		seed = seed/7 + seed*31 + 1
		n = min(n, len(b))
		out = append(out, string(b[:n]))
		b = b[n:]
	}
	return out
}

// watchPieces watches a response with header h whose body arrives in
// fuzzPieces, checks that the body passes unchanged and returns the result.
func watchPieces(t *testing.T, h http.Header, body []byte, seed uint64, src Source) Result {
	resp := &http.Response{Header: h, Body: &chunks{parts: fuzzPieces(body, seed)}}
	var got Result
	Watch(resp, src, 0, func(r Result) { got = r })
	out, err := io.ReadAll(resp.Body)
	if err != nil || !bytes.Equal(out, body) {
		t.Fatalf("body changed: %q, %v", out, err)
	}
	return got
}

func FuzzWatchJSON(f *testing.F) {
	for _, s := range []string{
		`{"usage":{"total_tokens":42}}`,
		`{"usage":{"total_tokens":9007199254740993}}`,
		`{"usage":{"total_tokens":1e2},"usage":{"total_tokens":3}}`,
		`{"\u0075sage":{"total_tokens":0}}`,
		`{"a":[1,{"usage":2}],"usage":{"total_tokens":-0.5E+3,"x":"\ud800"}}`,
		`{"usage":{"total_tokens":5}} x`,
	} {
		f.Add([]byte(s), uint64(0))
	}
	f.Fuzz(func(t *testing.T, body []byte, seed uint64) {
		const path = "usage.total_tokens"
		wantN, wantOK := refJSON(body, path)
		got := watchPieces(t, http.Header{}, body, seed, Source{JSON: path})
		if got.Found != wantOK || got.Units != wantN || !got.Complete {
			t.Fatalf("%q: got %+v, want %d %v", body, got, wantN, wantOK)
		}
	})
}

// refSSE is the reference answer for an event stream: split into lines
// and events as the format says, each event's data decoded by refJSON,
// the last usage found wins.
func refSSE(body []byte, path string) (uint64, bool) {
	s := strings.ReplaceAll(string(body), "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	s = strings.TrimPrefix(s, bom)
	lines := strings.Split(s, "\n")
	lines = lines[:len(lines)-1] // the last line has no end
	var units uint64
	var found, hasData bool
	var data []string
	for _, line := range lines {
		if line == "" {
			if hasData {
				if n, ok := refJSON([]byte(strings.Join(data, "\n")), path); ok && len(strings.Join(data, "\n")) <= DefaultMaxPrefix {
					units, found = n, true
				}
			}
			hasData, data = false, nil
			continue
		}
		name, value, _ := strings.Cut(line, ":")
		if name != "data" {
			continue
		}
		hasData = true
		data = append(data, strings.TrimPrefix(value, " "))
	}
	return units, found
}

func FuzzWatchSSE(f *testing.F) {
	for _, s := range []string{
		"data: {\"usage\":{\"total_tokens\":5}}\n\ndata: [DONE]\n\n",
		"data: {\"usage\":\r\ndata:{\"total_tokens\":5}}\r\n\r\n: c\rdata: {\"usage\":null}\r\r",
		bom + "data\ndata: {\"usage\":{\"total_tokens\":5}}\n\n",
		"event: x\ndata: {\"usage\":{\"total_tokens\":7}}\n\ndata: {\"usage\":{\"total_tokens\":8}}",
	} {
		f.Add([]byte(s), uint64(0))
	}
	f.Fuzz(func(t *testing.T, body []byte, seed uint64) {
		const path = "usage.total_tokens"
		wantN, wantOK := refSSE(body, path)
		got := watchPieces(t, http.Header{"Content-Type": {"text/event-stream"}}, body, seed, Source{SSE: path})
		if got.Found != wantOK || got.Units != wantN || !got.Complete {
			t.Fatalf("%q: got %+v, want %d %v", body, got, wantN, wantOK)
		}
	})
}

func FuzzFromRequest(f *testing.F) {
	f.Add([]byte(`{"max_tokens":100}`), "", uint64(0))
	f.Add([]byte(`{"max_tokens":-1}`), "7", uint64(3))
	f.Add([]byte(`{"max_tokens":null}`), "x", uint64(5))
	f.Add([]byte(`{"max_tokens":1,"MAX_TOKENS":2}`), "", uint64(7))
	f.Add([]byte(`{"max_tokens":1,"max_tokens":2}`), "", uint64(11))
	f.Add([]byte(`{"max_tokens":1} {"max_tokens":2}`), "", uint64(13))
	f.Add([]byte(`{"max_to\u212aens":1,"max_tokens":2}`), "", uint64(17))
	f.Fuzz(func(t *testing.T, body []byte, header string, seed uint64) {
		req, _ := http.NewRequest("POST", "http://x/", io.NopCloser(&chunks{parts: fuzzPieces(body, seed)}))
		req.ContentLength = int64(len(body))
		req.Header["X-Max"] = []string{header}
		n, found, err := FromRequest(req, RequestSource{JSON: "max_tokens", Header: "X-Max"}, 64)
		out, rerr := io.ReadAll(req.Body)
		if rerr != nil || !bytes.Equal(out, body) || req.ContentLength != int64(len(body)) {
			t.Fatalf("body changed: %q, %v", out, rerr)
		}
		if found && (err != nil || n > MaxUnits) {
			t.Fatalf("found %d with err %v", n, err)
		}
		// Where the whole body fits the prefix, the JSON answer is the
		// reference's, and a body that does not state it states nothing
		// (the header is not read for a request with a body).
		if len(body) <= 64 {
			wn, wok := refRequest(body, "max_tokens")
			if wok && (n != wn || !found) {
				t.Fatalf("%q: got %d %v %v, want %d", body, n, found, err, wn)
			}
			if !wok && found {
				t.Fatalf("%q with header %q: found %d, want nothing found", body, header, n)
			}
		}
	})
}
