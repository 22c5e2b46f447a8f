package usage

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
)

// Source says where a response reports its usage. Empty fields are not
// looked at. The first source that holds a usage wins, in this order:
//
//  1. Header, as a response header;
//  2. Header, as a trailer (only when the body was read to its end);
//  3. JSON, in a body that is not text/event-stream;
//  4. SSE, in a text/event-stream body.
//
// A header or trailer that is present but not a usage (see the package
// doc) counts as absent, so the next source is tried; when a header
// repeats, its first value counts.
type Source struct {
	// Header is the name of a response header or trailer.
	Header string
	// JSON is a dotted path into a JSON response body, such as
	// "usage.total_tokens". The body is parsed whatever its Content-Type
	// says, unless that is text/event-stream; it must be exactly one JSON
	// value of at most maxPrefix bytes, else no usage is found.
	JSON string
	// SSE is a dotted path into the JSON data of each event of a
	// text/event-stream response. The last event whose data holds a usage
	// at the path wins; an event whose field is absent, null or not a
	// usage, whose data is not JSON (such as "[DONE]"), or whose data is
	// longer than maxPrefix bytes changes nothing.
	SSE string
}

// Validate reports whether s can be used: Header a valid field name, JSON
// and SSE valid paths (see the package doc). The error names the field.
// Watch itself does not validate: an invalid field never finds a usage.
func (s Source) Validate() error {
	return errors.Join(
		validHeader("header", s.Header),
		validPath("json", s.JSON),
		validPath("sse", s.SSE),
	)
}

// Result is what Watch read from a response.
type Result struct {
	// Units is the usage; 0 when Found is false.
	Units uint64
	// Found reports whether a source held a usage.
	Found bool
	// From is where it was found: "header", "trailer", "json" or "sse";
	// "" when Found is false.
	From string
	// Complete reports whether the body was read to its end. When it is
	// false (the upstream broke off, the client went away), a usage may
	// still be Found: from a header, from a JSON body whose value had
	// ended, or from an SSE event received before; whether such a partial
	// usage is to be trusted is the caller's decision.
	Complete bool
	// Abandoned reports that the body was closed before its end while no
	// read had failed: its reader stopped (for a proxy, the client went
	// away or could not be written to), rather than the upstream breaking
	// off. Never with Complete.
	Abandoned bool
}

// Watch reads the usage of resp as its body passes. It replaces resp.Body
// with a reader that returns exactly what the upstream's body returns,
// when it returns it (no buffering, so streamed responses stay streamed),
// and parses the bytes on the way. done is called exactly once, on the
// goroutine that reads or closes the body, when the body returns io.EOF
// (Complete), another error, or is closed, whichever comes first. done
// delays whatever waits for that Read or Close (the end of the response
// to the client, for a proxy), so it should hand slow work off.
//
// maxPrefix bounds the bytes parsed from a JSON body and from each SSE
// event's data (DefaultMaxPrefix when 0 or negative); parsing holds none of
// them. A body with a Content-Encoding other than identity (gzip, br, ...)
// is not parsed: only the header and the trailer can then report a usage.
//
// The header is read when Watch is called, so it may be removed from
// resp.Header afterwards (to keep it from the client).
func Watch(resp *http.Response, src Source, maxPrefix int64, done func(Result)) {
	if maxPrefix <= 0 {
		maxPrefix = DefaultMaxPrefix
	}
	if done == nil {
		done = func(Result) {}
	}
	w := &watched{resp: resp, done: done, trailer: src.Header}
	if resp.Body == nil {
		resp.Body = http.NoBody
	}
	w.body = resp.Body
	resp.Body = w
	if src.Header != "" {
		if n, ok := firstUnits(resp.Header, src.Header); ok {
			w.res = Result{Units: n, Found: true, From: "header"}
			return // the header wins over everything in the body
		}
	}
	if !identity(resp.Header) {
		return
	}
	if isEventStream(resp.Header.Get("Content-Type")) {
		if p, err := parsePath(src.SSE); err == nil {
			w.mode = modeSSE
			w.sse.reset(p, maxPrefix)
		}
		return
	}
	if p, err := parsePath(src.JSON); err == nil {
		w.mode = modeJSON
		w.json.reset(p, maxPrefix)
	}
}

// How a watched body is parsed.
const (
	modeNone uint8 = iota
	modeJSON
	modeSSE
)

// watched is the body Watch installs.
type watched struct {
	body    io.ReadCloser
	resp    *http.Response
	done    func(Result)
	trailer string // trailer to read at the end, if no header was found
	mode    uint8

	mu       sync.Mutex // guards the parsers and finished
	finished bool
	res      Result // a usage from the header
	json     scanner
	sse      sseParser
}

func (w *watched) Read(p []byte) (int, error) {
	n, err := w.body.Read(p)
	w.mu.Lock()
	if w.finished {
		w.mu.Unlock()
		return n, err
	}
	if n > 0 {
		switch w.mode {
		case modeJSON:
			w.json.feed(p[:n])
		case modeSSE:
			w.sse.feed(p[:n])
		}
	}
	if err == nil {
		w.mu.Unlock()
		return n, err
	}
	w.finish(err == io.EOF, false) // unlocks
	return n, err
}

func (w *watched) Close() error {
	err := w.body.Close()
	w.mu.Lock()
	if w.finished {
		w.mu.Unlock()
		return err
	}
	w.finish(false, true) // unlocks
	return err
}

// finish computes the result, unlocks w.mu and calls done outside the
// lock (done may touch the body).
func (w *watched) finish(complete, abandoned bool) {
	w.finished = true
	r := w.result(complete)
	r.Abandoned = abandoned
	w.mu.Unlock()
	w.done(r)
}

func (w *watched) result(complete bool) Result {
	r := w.res
	r.Complete = complete
	if r.Found {
		return r
	}
	if complete && w.trailer != "" {
		if n, ok := firstUnits(w.resp.Trailer, w.trailer); ok {
			return Result{Units: n, Found: true, From: "trailer", Complete: true}
		}
	}
	switch w.mode {
	case modeJSON:
		if res, n, _ := w.json.end(); res == resFound {
			return Result{Units: n, Found: true, From: "json", Complete: complete}
		}
	case modeSSE:
		if w.sse.found {
			return Result{Units: w.sse.units, Found: true, From: "sse", Complete: complete}
		}
	}
	return r
}

// firstUnits parses the first value of the field name of h.
func firstUnits(h http.Header, name string) (uint64, bool) {
	vs := h.Values(name)
	if len(vs) == 0 {
		return 0, false
	}
	return parseUnits(vs[0])
}

// identity reports whether a body with header h is not content-coded.
func identity(h http.Header) bool {
	for _, v := range h.Values("Content-Encoding") {
		for tok := range strings.SplitSeq(v, ",") {
			if t := strings.TrimSpace(tok); t != "" && !strings.EqualFold(t, "identity") {
				return false
			}
		}
	}
	return true
}

// isEventStream reports whether the media type of a Content-Type is
// text/event-stream.
func isEventStream(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "text/event-stream")
}

func validPath(field, s string) error {
	if s == "" {
		return nil
	}
	if _, err := parsePath(s); err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	return nil
}

func validHeader(field, name string) error {
	if name == "" {
		return nil
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return fmt.Errorf("%s: %q is not a valid header name", field, name)
		}
	}
	return nil
}

// isTokenChar reports whether c may appear in an HTTP field name (RFC 9110
// token).
func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
