package usage

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/quotagate/quotagate/internal/benchloop"
)

// repeatReader returns body in pieces of at most size bytes, as a network
// body does, and can be rewound without allocating.
type repeatReader struct {
	body []byte
	off  int
	size int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.off == len(r.body) {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.size)], r.body[r.off:])
	r.off += n
	return n, nil
}

func (r *repeatReader) Close() error { return nil }

// benchWatch reads body through Watch b.N times in 32 KiB buffers (the
// proxy's) from Reads of at most chunk bytes.
func benchWatch(b *testing.B, h http.Header, body []byte, chunk int, src Source, want uint64) {
	buf := make([]byte, 32<<10)
	up := &repeatReader{body: body, size: chunk}
	resp := &http.Response{Header: h}
	var got Result
	done := func(r Result) { got = r }
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		up.off = 0
		resp.Body = up
		Watch(resp, src, 0, done)
		for {
			if _, err := resp.Body.Read(buf); err != nil {
				break
			}
		}
		resp.Body.Close()
	}
	if !got.Found || got.Units != want {
		b.Fatalf("got %+v, want %d", got, want)
	}
}

// reportCPU reports, when the returned func runs, the process's CPU time
// per op as cpu-ns/op: steadier than ns/op on a machine shared with other
// work.
func reportCPU(b *testing.B) func() {
	cpu0, ok0 := benchloop.ProcessCPU()
	return func() {
		if cpu1, ok := benchloop.ProcessCPU(); ok && ok0 && b.N > 0 {
			b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		}
	}
}

// BenchmarkWatchSSE: a 2,000-event chat completion stream (about 250 KiB)
// read in 256-byte network pieces, the usage in the last event.
func BenchmarkWatchSSE(b *testing.B) {
	var s strings.Builder
	for i := range 2000 {
		s.WriteString(`data: {"id":"chatcmpl-123","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok` + strconv.Itoa(i) + `"}}],"usage":null}` + "\n\n")
	}
	s.WriteString(`data: {"id":"chatcmpl-123","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":2000,"total_tokens":2010}}` + "\n\ndata: [DONE]\n\n")
	benchWatch(b, http.Header{"Content-Type": {"text/event-stream"}}, []byte(s.String()), 256, Source{SSE: "usage.total_tokens"}, 2010)
}

// BenchmarkWatchJSON: an 800 KiB JSON completion (text, nested objects and
// arrays, escapes) read in 16 KiB pieces, the usage at the end.
func BenchmarkWatchJSON(b *testing.B) {
	var s bytes.Buffer
	s.WriteString(`{"id":"x","choices":[`)
	for i := range 2500 {
		if i > 0 {
			s.WriteByte(',')
		}
		s.WriteString(`{"index":` + strconv.Itoa(i) + `,"message":{"role":"assistant","content":"` + strings.Repeat(`lorem ipsum \"dolor\" sit amet, `, 8) + `"},"logprobs":[0.5,-1.25e-3,null,true]}`)
	}
	s.WriteString(`],"usage":{"prompt_tokens":10,"completion_tokens":20,"total_tokens":30}}`)
	benchWatch(b, http.Header{"Content-Type": {"application/json"}}, s.Bytes(), 16<<10, Source{JSON: "usage.total_tokens"}, 30)
}

// BenchmarkWatchHeader: a usage header; the body passes unparsed.
func BenchmarkWatchHeader(b *testing.B) {
	benchWatch(b, http.Header{"X-Usage": {"30"}}, bytes.Repeat([]byte("x"), 64<<10), 16<<10, Source{Header: "X-Usage", JSON: "usage.total_tokens"}, 30)
}

// BenchmarkFromRequest: a 4 KiB chat request with max_tokens at the end.
func BenchmarkFromRequest(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("a", 4000) + `"}],"max_tokens":256}`)
	src := RequestSource{JSON: "max_tokens", Header: "X-Max-Tokens"}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		req := &http.Request{Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body))}
		n, found, err := FromRequest(req, src, 0)
		if n != 256 || !found || err != nil {
			b.Fatal(n, found, err)
		}
	}
}

// BenchmarkFromRequestAliases: the chat request of BenchmarkFromRequest
// read with an alias of max_tokens and a count ("n").
func BenchmarkFromRequestAliases(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("a", 4000) + `"}],"max_tokens":256,"n":2}`)
	src := RequestSource{JSON: "max_tokens", JSONAliases: []string{"max_completion_tokens"}, JSONCount: "n", Header: "X-Max-Tokens"}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		req := &http.Request{Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body))}
		n, found, err := FromRequest(req, src, 0)
		if n != 512 || !found || err != nil {
			b.Fatal(n, found, err)
		}
	}
}
