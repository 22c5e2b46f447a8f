package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
)

// The differential test sends one corpus of requests through the
// handler (the forwarder) and through the oracle, httputil.ReverseProxy
// with the same rules as its hooks (see oracle_test.go), each over a
// Transport with direct exchanges and over one without
// (server.upstream_exchanges: standard). Each request's upstream answer
// is scripted byte for byte. What the upstream receives (the raw request
// head and body), what the client receives (1xx responses, status,
// headers, framing, body, trailers) and what the hooks saw must be the
// same on all four paths.
//
// Differences allowed, each normalized below:
//   - Date, which the front server sets from the clock;
//   - the order of the names in an announced Trailer header, which
//     ReverseProxy joins in map order;
//   - a Content-Type the front server sniffed from the body of a streamed
//     response the upstream sent without one. ReverseProxy flushes the
//     headers of a response it streams on a timer goroutine that races
//     its first body write, and net/http sniffs a type when the write
//     wins, which it mostly does over a direct exchange (the body is at
//     hand) and never over net/http's Transport; the handler's own
//     forwarding flushes the headers first, as over net/http's Transport.
//   - how much of a body cut off upstream reached the client before the
//     abort, which depends on scheduling: it must be a prefix of the body.
//   - how many 100 Continue responses a client expecting one gets: the
//     front server sends its own when the body is first read, and the
//     upstream's, forwarded, may come before that read (one) or after it
//     (two), on every path. A client reads any number of 1xx responses
//     (RFC 9110, section 15.2), so repeats are collapsed to one.
// Nothing else is normalized: header order on the wire is Go's sorted
// order on every path.

// diffCase is one request of the corpus and the upstream's answer to it.
type diffCase struct {
	name string
	// base is the upstream URL's path and query ("" = none).
	base string
	// request is what the client sends: its head and its body, if any.
	request string
	// answer is what the upstream writes once it has read the request.
	answer string
	// close closes the upstream connection after the answer.
	close bool
	// hang makes the upstream answer nothing: the handler's timer (the
	// upstream has a timeout) is fired once the request arrived.
	hang bool
	// cutBody, when not "", is the whole body of an answer cut off
	// mid-body: the client's read fails (or the connection closes before
	// a response), and the bytes it got must be a prefix of cutBody.
	cutBody string
	// inProcess calls the handler with a request read from request,
	// without a front server (which answers OPTIONS * itself).
	inProcess bool
}

const okAnswer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}"

var diffCorpus = []diffCase{
	{name: "plain", request: "GET /v1/x HTTP/1.1\r\nHost: gw.example\r\nUser-Agent: ua/1\r\nAccept: */*\r\nX-Request-Id: r1\r\n\r\n", answer: okAnswer},
	{name: "keep-alive", request: "GET /a HTTP/1.1\r\nHost: gw.example\r\nConnection: keep-alive\r\nKeep-Alive: 300\r\nCookie: a=1\r\nCookie: b=2\r\nX-Empty: \r\nAccept-Encoding: gzip\r\n\r\n", answer: okAnswer},
	{name: "http 1.0 keep-alive", request: "GET /a HTTP/1.0\r\nHost: gw.example\r\nConnection: Keep-Alive\r\nProxy-Connection: keep-alive\r\n\r\n", answer: okAnswer},
	{name: "connection lists headers", request: "GET /a HTTP/1.1\r\nHost: gw.example\r\nConnection: X-Foo, x-bar , Keep-Alive\r\nX-Foo: 1\r\nX-Bar: 2\r\nX-Baz: 3\r\nKeep-Alive: timeout=5\r\n\r\n", answer: okAnswer},
	{name: "connection close and a name", request: "GET /a HTTP/1.1\r\nHost: gw.example\r\nConnection: close, X-Foo\r\nX-Foo: 1\r\nX-Keep: 2\r\n\r\n", answer: okAnswer},
	{name: "duplicated hop headers", request: "GET /a HTTP/1.1\r\nHost: gw.example\r\nConnection: X-A\r\nConnection: x-b,,\r\nX-A: 1\r\nX-B: 2\r\nX-B: 3\r\nKeep-Alive: 1\r\nKeep-Alive: 2\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\nProxy-Authenticate: x\r\nTrailer: X-T\r\nTE: gzip\r\nTE: deflate\r\n\r\n", answer: okAnswer},
	{name: "odd casing", request: "GET /a HTTP/1.1\r\nhOsT: gw.example\r\ncOnNeCtIoN: x-FOO, USER-agent\r\nx-fOO: 1\r\nuser-AGENT: ua\r\nproxy-AUTHORIZATION: x\r\nx_api_key: k\r\nX-API-KEY: k2\r\nauthorization: Bearer t\r\n\r\n", answer: okAnswer},
	{name: "te trailers", request: "GET /a HTTP/1.1\r\nHost: gw.example\r\nTE: deflate, trailers;q=1\r\n\r\n", answer: okAnswer},
	{name: "te trailers named in connection", request: "GET /a HTTP/1.1\r\nHost: gw.example\r\nConnection: TE\r\nTE: trailers\r\n\r\n", answer: okAnswer},
	{name: "upgrade without connection", request: "GET /a HTTP/1.1\r\nHost: gw.example\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n", answer: okAnswer},
	{name: "h2c upgrade", request: "GET /a HTTP/1.1\r\nHost: gw.example\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n", answer: okAnswer},
	{name: "websocket not allowed", request: "GET /ws HTTP/1.1\r\nHost: gw.example\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", answer: okAnswer},
	{name: "forwarded from the caller", request: "GET /a HTTP/1.1\r\nHost: gw.example\r\nX-Forwarded-For: 203.0.113.9\r\nX-Forwarded-For: 10.0.0.1, 10.0.0.2\r\nX-Forwarded-Host: evil.example\r\nX-Forwarded-Proto: https\r\nForwarded: for=1.2.3.4\r\nConnection: X-Forwarded-Host\r\n\r\n", answer: okAnswer},
	{name: "encoded path", base: "/base%2Fz/", request: "GET /a%2Fb/c%20d HTTP/1.1\r\nHost: gw.example\r\n\r\n", answer: okAnswer},
	{name: "encoded path plain base", base: "/base", request: "GET /a%2Fb HTTP/1.1\r\nHost: gw.example\r\n\r\n", answer: okAnswer},
	{name: "queries on both", base: "/base/?k=v", request: "GET /p?a=1&b=2 HTTP/1.1\r\nHost: gw.example\r\n\r\n", answer: okAnswer},
	{name: "unparsable query", base: "/?k=v", request: "GET /p?a=1;b=2&c=%zz&d HTTP/1.1\r\nHost: gw.example\r\n\r\n", answer: okAnswer},
	{name: "empty query", request: "GET /p? HTTP/1.1\r\nHost: gw.example\r\n\r\n", answer: okAnswer},
	{name: "double slashes", base: "/b/", request: "GET //x//y HTTP/1.1\r\nHost: gw.example\r\n\r\n", answer: okAnswer},
	{name: "empty user agent", request: "GET /a HTTP/1.1\r\nHost: gw.example\r\nUser-Agent: \r\n\r\n", answer: okAnswer},
	{name: "head", request: "HEAD /a HTTP/1.1\r\nHost: gw.example\r\n\r\n", answer: "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 42\r\n\r\n"},
	{name: "head without length", request: "HEAD /a HTTP/1.1\r\nHost: gw.example\r\n\r\n", answer: "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n"},
	{name: "options star", base: "/base", request: "OPTIONS * HTTP/1.1\r\nHost: gw.example\r\n\r\n", answer: "HTTP/1.1 204 No Content\r\nAllow: GET, HEAD\r\n\r\n", inProcess: true},
	{name: "options star no base", request: "OPTIONS * HTTP/1.1\r\nHost: gw.example\r\n\r\n", answer: "HTTP/1.1 200 OK\r\nAllow: GET, HEAD\r\nContent-Length: 0\r\n\r\n", inProcess: true},
	{name: "delete without body", request: "DELETE /a/1 HTTP/1.1\r\nHost: gw.example\r\nContent-Length: 0\r\n\r\n", answer: "HTTP/1.1 204 No Content\r\n\r\n"},
	{name: "expect on get", request: "GET /a HTTP/1.1\r\nHost: gw.example\r\nExpect: 100-continue\r\n\r\n", answer: okAnswer},
	{name: "http 1.0", request: "GET /a HTTP/1.0\r\nHost: gw.example\r\n\r\n", answer: okAnswer},
	{name: "response hop headers", request: "GET /a HTTP/1.1\r\nHost: gw.example\r\n\r\n",
		answer: "HTTP/1.1 200 OK\r\nConnection: X-Secret, x-other\r\nconnection: keep-alive\r\nX-Secret: s\r\nX-Other: o\r\nX-Kept: k\r\nKeep-Alive: timeout=5\r\nProxy-Authenticate: Basic\r\nProxy-Connection: x\r\nUpgrade: foo\r\nTE: trailers\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Length: 2\r\n\r\nhi"},
	{name: "response trailers", request: "GET /a HTTP/1.1\r\nHost: gw.example\r\nTE: trailers\r\n\r\n",
		answer: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTrailer: X-Usage, X-Other\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\nX-Usage: 5\r\nX-Other: o\r\n\r\n"},
	{name: "unannounced trailer", request: "GET /a HTTP/1.1\r\nHost: gw.example\r\n\r\n",
		answer: "HTTP/1.1 200 OK\r\nTrailer: X-Usage\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Usage: 5\r\nX-Extra: e\r\n\r\n"},
	{name: "early hints", request: "GET /a HTTP/1.1\r\nHost: gw.example\r\n\r\n",
		answer: "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </b.js>; rel=preload\r\nX-Hint: 2\r\n\r\n" + okAnswer},
	{name: "chunked", request: "GET /a HTTP/1.1\r\nHost: gw.example\r\n\r\n",
		answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n3\r\nefg\r\n0\r\n\r\n"},
	{name: "event stream", request: "GET /a HTTP/1.1\r\nHost: gw.example\r\nAccept: text/event-stream\r\n\r\n",
		answer: "HTTP/1.1 200 OK\r\nContent-Type: Text/Event-Stream; charset=utf-8\r\nContent-Length: 24\r\n\r\ndata: 1\n\ndata: 2\n\ndata: 3"},
	{name: "body until close", request: "GET /a HTTP/1.1\r\nHost: gw.example\r\n\r\n",
		answer: "HTTP/1.1 200 OK\r\nConnection: close\r\nX-A: 1\r\n\r\nuntil the end", close: true},
	{name: "closed mid-body", request: "GET /a HTTP/1.1\r\nHost: gw.example\r\n\r\n",
		answer: "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b", close: true, cutBody: "only ten bytes"},
	{name: "closed mid-chunk", request: "GET /a HTTP/1.1\r\nHost: gw.example\r\n\r\n",
		answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n10\r\nabc", close: true, cutBody: "helloabcdefghijklmnop"},
	{name: "error status", request: "GET /a HTTP/1.1\r\nHost: gw.example\r\n\r\n",
		answer: "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 3\r\nContent-Length: 4\r\n\r\nbusy"},
	{name: "not modified", request: "GET /a HTTP/1.1\r\nHost: gw.example\r\nIf-None-Match: \"x\"\r\n\r\n",
		answer: "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n"},
	{name: "unasked switch", request: "GET /a HTTP/1.1\r\nHost: gw.example\r\n\r\n",
		answer: "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n", close: true},
	{name: "malformed response", request: "GET /a HTTP/1.1\r\nHost: gw.example\r\n\r\n",
		answer: "HTTP/1.1 abc\r\n\r\n", close: true},
	{name: "closed before answering", request: "POST /a HTTP/1.1\r\nHost: gw.example\r\nContent-Length: 0\r\n\r\n",
		answer: "", close: true},
	{name: "timeout", request: "GET /a HTTP/1.1\r\nHost: gw.example\r\n\r\n", hang: true},
	{name: "post with length", request: "POST /a HTTP/1.1\r\nHost: gw.example\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"a\":\"bcd\"}", answer: okAnswer},
	{name: "get with a body", request: "GET /a HTTP/1.1\r\nHost: gw.example\r\nContent-Length: 4\r\n\r\nbody", answer: okAnswer},
	{name: "post chunked", request: "POST /a HTTP/1.1\r\nHost: gw.example\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", answer: okAnswer},
	{name: "post chunked with trailer", request: "POST /a HTTP/1.1\r\nHost: gw.example\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum, X-Quotagate-Tenant\r\n\r\n3\r\nabc\r\n0\r\nX-Sum: 1\r\nX-Quotagate-Tenant: evil\r\n\r\n", answer: okAnswer},
	{name: "post expecting continue", request: "POST /a HTTP/1.1\r\nHost: gw.example\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc", answer: okAnswer},
	{name: "put with connection listing", request: "PUT /a HTTP/1.1\r\nHost: gw.example\r\nConnection: X-Foo\r\nX-Foo: 1\r\nContent-Length: 2\r\n\r\nhi", answer: "HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n"},
	{name: "post answered early", request: "POST /a HTTP/1.1\r\nHost: gw.example\r\nContent-Length: 5\r\n\r\nhello", answer: "HTTP/1.1 413 Content Too Large\r\nConnection: close\r\nContent-Length: 3\r\n\r\nbig", close: true},
}

// rawUpstream records every request it reads (head and body) and answers
// with the current case's script.
type rawUpstream struct {
	ln      net.Listener
	mu      sync.Mutex
	c       diffCase
	reqs    []string
	arrived chan struct{} // receives once per request of a hanging case
	wg      sync.WaitGroup
}

func newRawUpstream(t *testing.T) *rawUpstream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{ln: ln, arrived: make(chan struct{}, 4)}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				defer c.Close()
				u.serve(c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); u.wg.Wait() })
	return u
}

// serve reads requests from c, head and body as they came, and answers
// each.
func (u *rawUpstream) serve(c net.Conn) {
	br := bufio.NewReader(c)
	for {
		var head bytes.Buffer
		for {
			line, err := br.ReadString('\n')
			head.WriteString(line)
			if err != nil {
				return
			}
			if line == "\r\n" {
				break
			}
		}
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head.Bytes())))
		if err != nil {
			return
		}
		if req.Header.Get("Expect") == "100-continue" {
			io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
		}
		if err := readRawBody(br, req, &head); err != nil {
			return
		}
		u.mu.Lock()
		u.reqs = append(u.reqs, head.String())
		dc := u.c
		u.mu.Unlock()
		if dc.hang {
			u.arrived <- struct{}{}
			io.Copy(io.Discard, br) // until the proxy gives up
			return
		}
		if _, err := io.WriteString(c, dc.answer); err != nil || dc.close {
			return
		}
	}
}

// readRawBody appends to raw the body of req, whose head was read, as it
// comes from br: Content-Length bytes, or the chunks and trailer of a
// chunked body.
func readRawBody(br *bufio.Reader, req *http.Request, raw *bytes.Buffer) error {
	if len(req.TransferEncoding) == 0 {
		_, err := io.CopyN(raw, br, max(req.ContentLength, 0))
		return err
	}
	line := func() (string, error) {
		l, err := br.ReadString('\n')
		raw.WriteString(l)
		return l, err
	}
	for {
		l, err := line()
		if err != nil {
			return err
		}
		var n int64
		if _, err := fmt.Sscanf(strings.TrimSpace(l), "%x", &n); err != nil {
			return err
		}
		if n == 0 {
			break
		}
		if _, err := io.CopyN(raw, br, n+2); err != nil { // the chunk and its CRLF
			return err
		}
	}
	for { // the trailer, up to the blank line
		l, err := line()
		if err != nil || l == "\r\n" {
			return err
		}
	}
}

// start makes c the case answered, and forgets the requests recorded.
func (u *rawUpstream) start(c diffCase) {
	u.mu.Lock()
	u.c, u.reqs = c, nil
	u.mu.Unlock()
}

func (u *rawUpstream) recorded() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.reqs)
}

// diffResult is everything observable about one exchange of the corpus.
type diffResult struct {
	Upstream  []string // requests (head and body), as received
	Early     []string // 1xx responses: status and headers
	Status    string
	Header    http.Header
	Framing   string // Content-Length or chunked, as the client read it
	Body      string
	BodyErr   bool
	Trailer   http.Header
	Observed  []int    // statuses shown to ObserveResponse
	Failures  []string // OnFailure calls
	Errors    []errorCall
	HeadersIn []string // the outbound request's header names SetHeaders saw
}

// diffPath is one way through a handler.
type diffPath struct {
	name      string
	transport http.RoundTripper
	// build is newHandler or newOracle.
	build func(Upstream, Options, afterFunc) (http.Handler, error)
}

func buildOracle(up Upstream, o Options, after afterFunc) (http.Handler, error) {
	return newOracle(up, o, after), nil
}

func TestForwardingMatchesReverseProxy(t *testing.T) {
	up := newRawUpstream(t)
	var tr [4]*Transport
	for i := range tr {
		tr[i] = NewTransport(TransportOptions{NoDirect: i%2 == 1})
		t.Cleanup(tr[i].CloseIdleConnections)
	}
	paths := []diffPath{{"forwarder", tr[0], newHandler}, {"forwarder/standard", tr[1], newHandler},
		{"reverseproxy", tr[2], buildOracle}, {"reverseproxy/standard", tr[3], buildOracle}}
	for _, c := range diffCorpus {
		t.Run(c.name, func(t *testing.T) {
			var results []diffResult
			for _, p := range paths {
				results = append(results, runDiffCase(t, up, c, p))
			}
			for i := 1; i < len(results); i++ {
				if !reflect.DeepEqual(results[0], results[i]) {
					t.Errorf("%s and %s differ:\n%s:\n%s\n%s:\n%s", paths[0].name, paths[i].name,
						paths[0].name, describe(results[0]), paths[i].name, describe(results[i]))
				}
			}
			if t.Failed() {
				return
			}
			if c.hang || c.answer == "" || strings.HasPrefix(c.answer, "HTTP/1.1 abc") {
				return
			}
			if len(results[0].Upstream) != 1 {
				t.Errorf("the upstream received %d requests, want 1", len(results[0].Upstream))
			}
		})
	}
}

// runDiffCase sends c's request through a handler over p's transport.
func runDiffCase(t *testing.T, up *rawUpstream, c diffCase, p diffPath) diffResult {
	t.Helper()
	var (
		mu  sync.Mutex
		res diffResult
	)
	errs := &errorLog{}
	timer := &manualTimer{}
	u, err := url.Parse("http://" + up.ln.Addr().String() + c.base)
	if err != nil {
		t.Fatal(err)
	}
	timeout := time.Duration(0)
	if c.hang {
		timeout = time.Hour // fired by hand
	}
	h, err := p.build(Upstream{Name: "diff", URL: u, Timeout: timeout}, Options{
		Transport: p.transport,
		Logger:    slog.New(slog.DiscardHandler),
		Observer: &hooks{
			WriteError: errs.write,
			SetHeaders: func(out *http.Request) {
				mu.Lock()
				for k := range out.Header {
					res.HeadersIn = append(res.HeadersIn, k)
				}
				mu.Unlock()
				out.Header.Set("X-Set-Last", "gateway")
			},
			ObserveResponse: func(resp *http.Response) {
				mu.Lock()
				res.Observed = append(res.Observed, resp.StatusCode)
				mu.Unlock()
				resp.Header.Set("X-Observed", "1")
			},
			OnFailure: func(r *http.Request, status int, written bool) {
				mu.Lock()
				res.Failures = append(res.Failures, fmt.Sprintf("%d written=%v", status, written))
				mu.Unlock()
			},
		}}, timer.after)
	if err != nil {
		t.Fatal(err)
	}
	up.start(c)
	var (
		resp    *http.Response
		body    []byte
		bodyErr error
	)
	if c.inProcess {
		resp, body = serveInProcess(t, h, c.request)
	} else {
		resp, body, bodyErr = serveFront(t, h, up, timer, c, p.name, &res)
	}
	mu.Lock()
	defer mu.Unlock()
	res.Upstream = up.recorded()
	slices.Sort(res.HeadersIn)
	res.Errors = errs.get()
	if resp == nil { // the connection closed before a response
		res.Status = "no response"
		return res
	}
	res.Status = resp.Status
	res.Header = resp.Header.Clone()
	delete(res.Header, "Date")
	if tr := res.Header["Trailer"]; tr != nil {
		var names []string
		for _, v := range tr {
			for n := range strings.SplitSeq(v, ",") {
				names = append(names, strings.TrimSpace(n))
			}
		}
		slices.Sort(names)
		res.Header["Trailer"] = []string{strings.Join(names, ", ")}
	}
	if answerHead, _, _ := strings.Cut(c.answer, "\r\n\r\n"); !strings.Contains(strings.ToLower(answerHead), "content-type:") &&
		resp.ContentLength < 0 && res.Header.Get("Content-Type") == "text/plain; charset=utf-8" {
		delete(res.Header, "Content-Type") // sniffed, see the allowed differences
	}
	res.Framing = fmt.Sprintf("length=%d te=%v", resp.ContentLength, resp.TransferEncoding)
	res.Body, res.BodyErr = string(body), bodyErr != nil
	if c.cutBody != "" {
		if !res.BodyErr {
			t.Errorf("%s: a body cut off upstream ended without an error", p.name)
		}
		if !strings.HasPrefix(c.cutBody, res.Body) {
			t.Errorf("%s: body %q is not a prefix of %q", p.name, res.Body, c.cutBody)
		}
		res.Body = ""
	}
	res.Trailer = resp.Trailer
	return res
}

// serveInProcess calls h with the request read from raw and returns what
// it answered.
func serveInProcess(t *testing.T, h http.Handler, raw string) (*http.Response, []byte) {
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		t.Fatal(err)
	}
	req.RemoteAddr = "127.0.0.1:40000"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	resp := rec.Result()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

// serveFront sends c's request to a front server calling h over a raw
// connection, records the 1xx responses in res, and returns the final
// response (nil when the connection closed before it), its body and the
// error that ended the body.
func serveFront(t *testing.T, h http.Handler, up *rawUpstream, timer *manualTimer, c diffCase, name string, res *diffResult) (*http.Response, []byte, error) {
	t.Helper()
	served := make(chan struct{}, 1)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { served <- struct{}{} }()
		h.ServeHTTP(w, r)
	}))
	defer front.Close()
	conn, err := net.Dial("tcp", front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, c.request); err != nil {
		t.Fatal(err)
	}
	if c.hang {
		select {
		case <-up.arrived:
		case <-time.After(waitFor):
			proctest.FatalOverrun(t, "%s: the request did not reach the upstream within %v", name, waitFor)
		}
		if timer.fire() == 0 {
			t.Fatalf("%s: no timer to fire", name)
		}
	}
	conn.SetDeadline(time.Now().Add(waitFor))
	br := bufio.NewReader(conn)
	method, _, _ := strings.Cut(c.request, " ")
	var (
		resp    *http.Response
		body    []byte
		bodyErr error
	)
	for {
		resp, err = http.ReadResponse(br, &http.Request{Method: method})
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			proctest.FatalOverrun(t, "%s: no response within %v", name, waitFor)
		}
		if err != nil {
			if c.cutBody == "" {
				t.Fatalf("%s: reading the response: %v", name, err)
			}
			resp = nil
			break
		}
		if resp.StatusCode >= 200 {
			body, bodyErr = io.ReadAll(resp.Body)
			if ne, ok := bodyErr.(net.Error); ok && ne.Timeout() {
				proctest.FatalOverrun(t, "%s: the response body did not end within %v", name, waitFor)
			}
			break
		}
		early := fmt.Sprintf("%s %v", resp.Status, resp.Header)
		if resp.StatusCode == http.StatusContinue && len(res.Early) > 0 && res.Early[len(res.Early)-1] == early {
			continue // a repeated 100 Continue, see the allowed differences
		}
		res.Early = append(res.Early, early)
	}
	select {
	case <-served:
	case <-time.After(waitFor):
		proctest.FatalOverrun(t, "%s: the handler did not return within %v", name, waitFor)
	}
	return resp, body, bodyErr
}

func describe(r diffResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  upstream: %q\n  early: %q\n  status: %s\n  header: %v\n  framing: %s\n  body: %q (error %v)\n  trailer: %v\n  observed: %v\n  failures: %v\n  errors: %v\n  SetHeaders saw: %v",
		r.Upstream, r.Early, r.Status, r.Header, r.Framing, r.Body, r.BodyErr, r.Trailer, r.Observed, r.Failures, r.Errors, r.HeadersIn)
	return b.String()
}
