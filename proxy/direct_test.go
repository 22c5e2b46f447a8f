//go:build linux

package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/quotagate/quotagate/internal/proctest"
)

// scripted is an upstream that answers each connection with a script: it
// reads a request at a time and calls serve with the connection's number
// (from 0), the request's number on it and the writer; serve returns false
// to close the connection.
type scripted struct {
	ln    net.Listener
	conns atomic.Int64
	wg    sync.WaitGroup
}

func newScripted(t *testing.T, serve func(conn, req int, r *http.Request, w *bufio.Writer) bool) *scripted {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &scripted{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := int(s.conns.Add(1) - 1)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				br, bw := bufio.NewReader(c), bufio.NewWriter(c)
				for i := 0; ; i++ {
					r, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					ok := serve(n, i, r, bw)
					bw.Flush()
					if !ok {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

func (s *scripted) url() string { return "http://" + s.ln.Addr().String() }

// directTransport is a transport whose direct pool the test can inspect,
// with its dials counted.
func directTransport(t *testing.T, adjust func(p *directPool)) (*Transport, *atomic.Int64) {
	t.Helper()
	tr := NewTransport(TransportOptions{})
	t.Cleanup(tr.CloseIdleConnections)
	var dials atomic.Int64
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return dial(ctx, network, addr)
	}
	if adjust != nil {
		adjust(tr.direct)
	}
	return tr, &dials
}

// idle returns how many connections the direct pool keeps.
func (p *directPool) idleNow() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.idleCount
}

// getServed is getStatus, then a wait until the front handler has
// returned, so that the connection it used is back in the pool.
func getServed(t *testing.T, f *fixture, path string) (int, string) {
	t.Helper()
	code, body := getStatus(t, f, path)
	f.waitServed(t)
	return code, body
}

func TestDirectEligible(t *testing.T) {
	mk := func(method, url string, adjust func(r *http.Request)) *http.Request {
		r := httptest.NewRequest(method, url, nil)
		r.RequestURI = ""
		if adjust != nil {
			adjust(r)
		}
		return r
	}
	for _, c := range []struct {
		name string
		req  *http.Request
		want bool
	}{
		{"GET", mk("GET", "http://up/a", nil), true},
		{"HEAD", mk("HEAD", "http://up/a", nil), true},
		{"OPTIONS", mk("OPTIONS", "http://up/a", nil), true},
		{"GET with NoBody", mk("GET", "http://up/a", func(r *http.Request) { r.Body = http.NoBody }), true},
		{"POST", mk("POST", "http://up/a", nil), true},
		{"DELETE", mk("DELETE", "http://up/a", nil), true},
		{"CONNECT", mk("CONNECT", "http://up/a", nil), false},
		{"https", mk("GET", "https://up/a", nil), false},
		{"GET with a body", mk("GET", "http://up/a", func(r *http.Request) {
			r.Body, r.ContentLength = io.NopCloser(strings.NewReader("x")), 1
		}), false},
		{"GET with a body of unknown length", mk("GET", "http://up/a", func(r *http.Request) {
			r.Body, r.ContentLength = io.NopCloser(strings.NewReader("x")), -1
		}), false},
		{"chunked", mk("GET", "http://up/a", func(r *http.Request) { r.TransferEncoding = []string{"chunked"} }), false},
		{"trailer", mk("GET", "http://up/a", func(r *http.Request) { r.Trailer = http.Header{"X": nil} }), false},
		{"upgrade", mk("GET", "http://up/a", func(r *http.Request) { r.Header.Set("Upgrade", "websocket") }), false},
		{"expect", mk("GET", "http://up/a", func(r *http.Request) { r.Header.Set("Expect", "100-continue") }), false},
		{"close", mk("GET", "http://up/a", func(r *http.Request) { r.Close = true }), false},
	} {
		if got := directEligible(c.req); got != c.want {
			t.Errorf("%s: eligible %v, want %v", c.name, got, c.want)
		}
	}
}

// TestDirectKeepsConnection: responses of every framing (length, chunked
// with a trailer, none for HEAD and 204) leave the connection reusable,
// and every request after the first reuses it.
func TestDirectKeepsConnection(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/chunked":
			w.Header().Set("Trailer", "X-Sum")
			w.Write([]byte("chun"))
			w.(http.Flusher).Flush()
			w.Write([]byte("ked"))
			w.Header().Set("X-Sum", "7")
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		default:
			w.Header().Set("Content-Length", "5")
			w.Write([]byte("hello"))
		}
	}))
	defer up.Close()
	tr, dials := directTransport(t, nil)
	f := newFixture(t, up.URL, 0, nil, func(o *testOptions) { o.Transport = tr })
	for i := range 3 {
		if code, body := getServed(t, f, "/len"); code != 200 || body != "hello" {
			t.Fatalf("GET %d: %d %q", i, code, body)
		}
	}
	resp, err := http.Get(f.front.URL + "/chunked")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	f.waitServed(t)
	if string(b) != "chunked" || resp.Trailer.Get("X-Sum") != "7" {
		t.Errorf("chunked: %q, trailer %v", b, resp.Trailer)
	}
	req, _ := http.NewRequest("HEAD", f.front.URL+"/len", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	f.waitServed(t)
	if resp.StatusCode != 200 || resp.ContentLength != 5 {
		t.Errorf("HEAD: %d, length %d", resp.StatusCode, resp.ContentLength)
	}
	if code, _ := getServed(t, f, "/empty"); code != http.StatusNoContent {
		t.Errorf("204: %d", code)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("%d dials for 6 sequential requests, want 1", n)
	}
	if n := tr.direct.idleNow(); n != 1 {
		t.Errorf("%d idle direct connections, want 1", n)
	}
}

// TestDirectClosedConnection: an upstream closes a kept connection. The
// next request gets its answer on a new connection, whether the check
// before reuse sees the close or the exchange finds it and sends the
// request again; a new connection that fails is not tried again.
func TestDirectClosedConnection(t *testing.T) {
	for _, peek := range []bool{true, false} {
		name := "peek"
		if !peek {
			name = "retry"
		}
		t.Run(name, func(t *testing.T) {
			up := newScripted(t, func(conn, req int, r *http.Request, w *bufio.Writer) bool {
				io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				return false // closes after its first response, without saying so
			})
			tr, dials := directTransport(t, func(p *directPool) {
				if !peek {
					p.peekIdle = func(net.Conn) func() bool { return func() bool { return true } }
				}
			})
			f := newFixture(t, up.url(), 0, nil, func(o *testOptions) { o.Transport = tr })
			if code, body := getServed(t, f, "/1"); code != 200 || body != "ok" {
				t.Fatalf("first: %d %q", code, body)
			}
			// The upstream closed its end; wait until ours sees it, so that
			// the check before reuse has something to see.
			waitPeerClosed(t, tr.direct, up.url())
			if code, body := getServed(t, f, "/2"); code != 200 || body != "ok" {
				t.Fatalf("second: %d %q", code, body)
			}
			if n := dials.Load(); n != 2 {
				t.Errorf("%d dials, want 2", n)
			}
		})
	}
	t.Run("POST not sent again", func(t *testing.T) {
		var posts atomic.Int64
		up := newScripted(t, func(conn, req int, r *http.Request, w *bufio.Writer) bool {
			if r.Method == http.MethodPost {
				posts.Add(1)
				return false // took it, and hung up without an answer
			}
			io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			return true
		})
		tr, dials := directTransport(t, func(p *directPool) {
			p.peekIdle = func(net.Conn) func() bool { return func() bool { return true } }
		})
		f := newFixture(t, up.url(), 0, nil, func(o *testOptions) { o.Transport = tr })
		getServed(t, f, "/warm")
		resp, err := http.Post(f.front.URL+"/pay", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		f.waitServed(t)
		if resp.StatusCode != http.StatusBadGateway || posts.Load() != 1 || dials.Load() != 1 {
			t.Errorf("POST on a connection closed after reading it: %d, upstream got %d over %d dials; want 502, 1, 1",
				resp.StatusCode, posts.Load(), dials.Load())
		}
	})
	t.Run("refused", func(t *testing.T) {
		up := newScripted(t, func(int, int, *http.Request, *bufio.Writer) bool { return false })
		addr := up.ln.Addr().String()
		tr, dials := directTransport(t, nil)
		tr.DialContext = func(ctx context.Context, network, a string) (net.Conn, error) {
			dials.Add(1) // refused, as by a host with nothing listening
			return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
		}
		fl := &failures{}
		f := newFixture(t, "http://"+addr, time.Hour, nil, func(o *testOptions) {
			o.Transport = tr
			o.OnFailure = fl.add
		})
		if code, _ := getServed(t, f, "/"); code != http.StatusBadGateway {
			t.Errorf("status %d, want 502", code)
		}
		if got := fl.get(); !slices.Equal(got, []failure{{http.StatusBadGateway, false}}) || dials.Load() != 1 || up.conns.Load() != 0 {
			t.Errorf("OnFailure %v after %d dials, %d connections; want [{502 false}] (nothing was sent), 1, 0", got, dials.Load(), up.conns.Load())
		}
	})
	t.Run("fresh connection fails", func(t *testing.T) {
		up := newScripted(t, func(conn, req int, r *http.Request, w *bufio.Writer) bool { return false })
		tr, dials := directTransport(t, nil)
		fl := &failures{}
		f := newFixture(t, up.url(), 0, nil, func(o *testOptions) {
			o.Transport = tr
			o.OnFailure = fl.add
		})
		if code, _ := getServed(t, f, "/"); code != http.StatusBadGateway {
			t.Errorf("status %d, want 502", code)
		}
		if n := dials.Load(); n != 1 {
			t.Errorf("%d dials, want 1: a new connection that fails is not tried again", n)
		}
		if got := fl.get(); !slices.Equal(got, []failure{{http.StatusBadGateway, true}}) {
			t.Errorf("OnFailure %v, want [{502 true}]: the request had been sent", got)
		}
	})
}

// waitPeerClosed waits until the idle direct connection to addr has
// something to read: the end of the stream, or bytes the upstream sent
// after its response.
func waitPeerClosed(t *testing.T, p *directPool, rawURL string) {
	t.Helper()
	key := strings.TrimPrefix(rawURL, "http://")
	p.mu.Lock()
	list := p.idle[key]
	if len(list) != 1 {
		p.mu.Unlock()
		t.Fatalf("%d idle connections to %s, want 1", len(list), key)
	}
	conn := list[0].conn
	p.mu.Unlock()
	rc, err := conn.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	quiet := func() bool { // nothing to read yet, by a peek of the test's own
		var errno syscall.Errno
		var b [1]byte
		rc.Read(func(fd uintptr) bool {
			_, _, errno = syscall.Syscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
				syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
			return true
		})
		return errno == syscall.EAGAIN
	}
	deadline := time.Now().Add(waitFor)
	for quiet() {
		if time.Now().After(deadline) {
			proctest.FatalOverrun(t, "the upstream's close did not reach the gateway's socket within %v", waitFor)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestDirectUnaskedBytes: bytes an upstream sends past a response, with
// it or later, are never read as the next request's response.
func TestDirectUnaskedBytes(t *testing.T) {
	const forged = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged"
	t.Run("with the response", func(t *testing.T) {
		up := newScripted(t, func(conn, req int, r *http.Request, w *bufio.Writer) bool {
			io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			if conn == 0 {
				io.WriteString(w, forged)
			}
			return true
		})
		tr, dials := directTransport(t, nil)
		f := newFixture(t, up.url(), 0, nil, func(o *testOptions) { o.Transport = tr })
		for i := range 2 {
			if code, body := getServed(t, f, "/"); code != 200 || body != "ok" {
				t.Fatalf("request %d: %d %q", i, code, body)
			}
		}
		if n := dials.Load(); n != 2 {
			t.Errorf("%d dials, want 2: the connection with extra bytes was kept", n)
		}
	})
	t.Run("later", func(t *testing.T) {
		sent := make(chan struct{})
		up := newScripted(t, func(conn, req int, r *http.Request, w *bufio.Writer) bool {
			io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			if conn == 0 {
				w.Flush()
				<-sent
				io.WriteString(w, forged)
			}
			return true
		})
		tr, dials := directTransport(t, nil)
		f := newFixture(t, up.url(), 0, nil, func(o *testOptions) { o.Transport = tr })
		if code, body := getServed(t, f, "/"); code != 200 || body != "ok" {
			t.Fatalf("first: %d %q", code, body)
		}
		close(sent)
		waitPeerClosed(t, tr.direct, up.url()) // readable now: the forged bytes
		if code, body := getServed(t, f, "/"); code != 200 || body != "ok" {
			t.Fatalf("second: %d %q", code, body)
		}
		if n := dials.Load(); n != 2 {
			t.Errorf("%d dials, want 2", n)
		}
	})
}

// TestDirectIdleTimeout: a connection idle for the idle timeout is not
// used again.
func TestDirectIdleTimeout(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	var now atomic.Int64
	now.Store(time.Unix(1_700_000_000, 0).UnixNano())
	tr, dials := directTransport(t, func(p *directPool) {
		p.now = func() time.Time { return time.Unix(0, now.Load()) }
	})
	f := newFixture(t, up.URL, 0, nil, func(o *testOptions) { o.Transport = tr })
	getServed(t, f, "/")
	now.Add(int64(tr.IdleConnTimeout - time.Nanosecond))
	getServed(t, f, "/")
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d dials before the idle timeout, want 1", n)
	}
	now.Add(int64(tr.IdleConnTimeout))
	if code, body := getServed(t, f, "/"); code != 200 || body != "ok" {
		t.Fatalf("after the idle timeout: %d %q", code, body)
	}
	if n := dials.Load(); n != 2 {
		t.Errorf("%d dials, want 2: a connection idle for the timeout was used", n)
	}
}

// TestDirectIdleCap: no more connections per host are kept than
// MaxIdleConnsPerHost, however many were open at once.
func TestDirectIdleCap(t *testing.T) {
	const parallel, keep = 6, 2
	var arrived sync.WaitGroup
	arrived.Add(parallel)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		arrived.Wait() // all are open at once
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	tr, dials := directTransport(t, func(p *directPool) { p.maxIdlePerHost = keep })
	f := newFixture(t, up.URL, 0, nil, func(o *testOptions) { o.Transport = tr })
	f.served = make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() {
			resp, err := http.Get(f.front.URL)
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	wg.Wait()
	for range parallel {
		f.waitServed(t)
	}
	if n := dials.Load(); n != parallel {
		t.Errorf("%d dials, want %d", n, parallel)
	}
	if n := tr.direct.idleNow(); n != keep {
		t.Errorf("%d idle connections, want %d", n, keep)
	}
}

// TestDirectClientGoneMidBody: a client that leaves while the body
// streams ends the exchange, and its connection is closed, never kept
// with the rest of the body unread; nor is it logged as a read error.
func TestDirectClientGoneMidBody(t *testing.T) {
	release := make(chan struct{})
	up := newScripted(t, func(conn, req int, r *http.Request, w *bufio.Writer) bool {
		if conn > 0 {
			io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			return true
		}
		// Chunked, so that the proxy flushes each piece to the client.
		io.WriteString(w, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
		w.Flush()
		<-release
		return false
	})
	defer close(release)
	tr, dials := directTransport(t, nil)
	f := newFixture(t, up.url(), 0, nil, func(o *testOptions) { o.Transport = tr })
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", f.front.URL+"/stream", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "first" {
		t.Fatalf("first bytes %q, %v", buf, err)
	}
	cancel()
	resp.Body.Close()
	f.waitServed(t)
	if n := tr.direct.idleNow(); n != 0 {
		t.Errorf("%d idle connections after an abandoned body, want 0", n)
	}
	// The caller's doing, as over net/http's Transport: the interrupted
	// read fails with the context's error, which the copy does not log,
	// not with the deadline that interrupted it ("i/o timeout", a Warn
	// read error against the upstream).
	if logs := f.logs.String(); strings.Contains(logs, "read error") {
		t.Errorf("a client gone mid-body was logged as a read error:\n%s", logs)
	}
	if code, body := getServed(t, f, "/next"); code != 200 || body != "ok" {
		t.Errorf("next: %d %q", code, body)
	}
	if n := dials.Load(); n != 2 {
		t.Errorf("%d dials, want 2", n)
	}
}

// TestDirectInformational: an upstream's 103 reaches the client before
// the response; more informational responses than the limit are a 502.
func TestDirectInformational(t *testing.T) {
	up := newScripted(t, func(conn, req int, r *http.Request, w *bufio.Writer) bool {
		n := 1
		if r.URL.Path == "/many" {
			n = directMax1xx + 1
		}
		for range n {
			io.WriteString(w, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
		}
		io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
	tr, _ := directTransport(t, nil)
	f := newFixture(t, up.url(), 0, nil, func(o *testOptions) { o.Transport = tr })
	var hints []string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		hints = append(hints, h.Get("Link"))
		return nil
	}}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", f.front.URL+"/one", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	f.waitServed(t)
	if resp.StatusCode != 200 || string(b) != "ok" || len(hints) != 1 || hints[0] != "</a.css>; rel=preload" {
		t.Errorf("one hint: %d %q, hints %q", resp.StatusCode, b, hints)
	}
	if code, _ := getServed(t, f, "/many"); code != http.StatusBadGateway {
		t.Errorf("%d informational responses: %d, want 502", directMax1xx+1, code)
	}
}

// TestDirectHeaderLimit: response headers past the limit are a 502 and
// cost no more memory than the limit.
func TestDirectHeaderLimit(t *testing.T) {
	up := newScripted(t, func(conn, req int, r *http.Request, w *bufio.Writer) bool {
		io.WriteString(w, "HTTP/1.1 200 OK\r\nX-Big: "+strings.Repeat("a", 4<<10)+"\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
	tr, _ := directTransport(t, func(p *directPool) { p.headerLimit = 1 << 10 })
	f := newFixture(t, up.url(), 0, nil, func(o *testOptions) { o.Transport = tr })
	if code, _ := getServed(t, f, "/"); code != http.StatusBadGateway {
		t.Errorf("status %d, want 502", code)
	}
	if n := tr.direct.idleNow(); n != 0 {
		t.Errorf("%d idle connections, want 0", n)
	}
}

// TestDirectInvalidHeader: a header value that would split the request
// is refused, as net/http's Transport refuses it, and nothing is sent.
func TestDirectInvalidHeader(t *testing.T) {
	var got atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got.Add(1) }))
	defer up.Close()
	tr, dials := directTransport(t, nil)
	f := newFixture(t, up.URL, 0, nil, func(o *testOptions) {
		o.Transport = tr
		o.SetHeaders = func(out *http.Request) { out.Header.Set("X-Tenant", "a\r\nX-Admin: 1") }
	})
	if code, _ := getServed(t, f, "/"); code != http.StatusBadGateway {
		t.Errorf("status %d, want 502", code)
	}
	if got.Load() != 0 || dials.Load() != 0 {
		t.Errorf("upstream got %d requests over %d dials, want none", got.Load(), dials.Load())
	}
}

// TestDirectNoResponseMixup: many callers at once over kept connections
// that the upstream closes now and then (saying so, or not), answers with
// informational responses first, chunked or with a length, or with a
// stray byte after the body: every caller gets the answer to its own
// request, never another's.
func TestDirectNoResponseMixup(t *testing.T) {
	up := newScripted(t, func(conn, req int, r *http.Request, w *bufio.Writer) bool {
		id := r.Header.Get("X-Request-Id")
		body := "for " + id
		n := 0
		for _, c := range id {
			n = n*31 + int(c)
		}
		if n < 0 {
			n = -n
		}
		switch n % 6 {
		case 0: // closes, saying so
			fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			return false
		case 1: // closes without saying so
			fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			return false
		case 2: // chunked
			fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), body)
		case 3: // a hint first
			fmt.Fprintf(w, "HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		case 4: // a stray byte after the body
			fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%sX", len(body), body)
		default:
			fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		}
		return true
	})
	tr, _ := directTransport(t, nil)
	f := newFixture(t, up.url(), time.Minute, nil, func(o *testOptions) { o.Transport = tr })
	const workers, each = 16, 100
	f.served = make(chan struct{}, workers*each)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	var wrong, failed atomic.Int64
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprintf("w%d-r%d", w, i)
				req, _ := http.NewRequest("GET", f.front.URL+"/"+id, nil)
				req.Header.Set("X-Request-Id", id)
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case resp.StatusCode == http.StatusOK && string(b) == "for "+id:
				case resp.StatusCode == http.StatusOK:
					if wrong.Add(1) == 1 {
						t.Errorf("request %s got %q", id, b)
					}
				default:
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if wrong.Load() != 0 || failed.Load() != 0 {
		t.Errorf("%d answers to another request, %d failed, of %d", wrong.Load(), failed.Load(), workers*each)
	}
}

// TestDirectBodyReadAfterEnd: a body read to its end answers io.EOF to
// every later read, as net/http's bodies do, and one closed early answers
// an error.
func TestDirectBodyReadAfterEnd(t *testing.T) {
	up := newScripted(t, func(conn, req int, r *http.Request, w *bufio.Writer) bool {
		io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
	tr, _ := directTransport(t, nil)
	for _, early := range []bool{false, true} {
		req, _ := http.NewRequest("GET", up.url()+"/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if early {
			resp.Body.Close()
			if _, err := resp.Body.Read(make([]byte, 1)); err == nil || err == io.EOF {
				t.Errorf("read after an early close: %v, want an error other than EOF", err)
			}
			continue
		}
		if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "ok" {
			t.Fatalf("body %q, %v", b, err)
		}
		for range 2 {
			if n, err := resp.Body.Read(make([]byte, 1)); n != 0 || err != io.EOF {
				t.Errorf("read after the end: %d, %v; want 0, EOF", n, err)
			}
		}
		resp.Body.Close()
	}
}

func TestDialAddr(t *testing.T) {
	for host, want := range map[string]string{
		"api.internal":      "api.internal:80",
		"api.internal:8080": "api.internal:8080",
		"10.0.0.7":          "10.0.0.7:80",
		"[::1]":             "[::1]:80",
		"[::1]:9000":        "[::1]:9000",
	} {
		if got := dialAddr(host); got != want {
			t.Errorf("dialAddr(%q) = %q, want %q", host, got, want)
		}
	}
}
