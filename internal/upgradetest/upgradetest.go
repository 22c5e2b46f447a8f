//lint:file-ignore SA1019 the upstream must accept the h2c upgrade, which only x/net/http2/h2c (deprecated) still offers

// Package upgradetest serves tests of protocol upgrades: a real upstream
// that accepts h2c and switches protocols on demand, the raw requests that
// ask for upgrades, and a client connection that sends raw requests in turn.
package upgradetest

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"
)

// Header lines (each ending in CRLF) that ask for an upgrade.
const (
	// WebSocket is a WebSocket handshake (RFC 6455) with the RFC's sample
	// key, whose accept value is WebSocketAccept.
	WebSocket = "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
	// H2C asks for h2c as RFC 7540, 3.2 has it.
	H2C = "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n"
	// H2CLenient asks for h2c without naming HTTP2-Settings in Connection,
	// so a reverse proxy's hop-by-hop removal keeps it.
	H2CLenient = "Connection: Upgrade\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n"
)

// WebSocketAccept is the Sec-WebSocket-Accept answering WebSocket's key.
const WebSocketAccept = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="

// Request is what the upstream received.
type Request struct {
	Method, Path, Proto string
	Header              http.Header
}

// Upstream is a real HTTP server that accepts the h2c upgrade, leniently
// (like many servers, it does not insist that HTTP2-Settings be named in
// Connection), and otherwise answers by the last segment of the path:
//
//	101-<token>  101 Switching Protocols with Upgrade: <token> (none when
//	             the token is empty), and Sec-WebSocket-Accept for
//	             "websocket", whatever the request asked; then it echoes
//	             every byte of the tunnel
//	anything     200 "from <protocol>", e.g. "from HTTP/1.1"
type Upstream struct {
	URL string

	mu   sync.Mutex
	seen []Request
}

// NewUpstream starts an Upstream on 127.0.0.1 and stops it when t ends.
func NewUpstream(t testing.TB) *Upstream {
	u := &Upstream{}
	h := h2c.NewHandler(http.HandlerFunc(u.serve), &http2.Server{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Http2-Settings") != "" {
			r.Header.Add("Connection", "HTTP2-Settings")
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	u.URL = srv.URL
	return u
}

func (u *Upstream) serve(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.seen = append(u.seen, Request{Method: r.Method, Path: r.URL.Path, Proto: r.Proto, Header: r.Header.Clone()})
	u.mu.Unlock()
	last := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	token, ok := strings.CutPrefix(last, "101-")
	if !ok {
		_, _ = io.WriteString(w, "from "+r.Proto)
		return
	}
	head := "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
	if token != "" {
		head += "Upgrade: " + token + "\r\n"
	}
	if token == "websocket" {
		sum := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		head += "Sec-WebSocket-Accept: " + base64.StdEncoding.EncodeToString(sum[:]) + "\r\n"
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	_, _ = brw.WriteString(head + "\r\n")
	_ = brw.Flush()
	_, _ = io.Copy(conn, brw)
}

// Requests returns what the upstream has received, in order.
func (u *Upstream) Requests() []Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]Request(nil), u.seen...)
}

// Conn is a client connection that sends raw requests and reads their
// responses in turn. After a 101, Raw and Reader are the tunnel.
type Conn struct {
	Raw    net.Conn
	Reader *bufio.Reader
}

// Dial connects to addr (host:port, or a URL starting with http://) with a
// deadline of 10 s for the whole conversation, and closes the connection
// when t ends.
func Dial(t testing.TB, addr string) *Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(addr, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	return &Conn{Raw: conn, Reader: bufio.NewReader(conn)}
}

// Send writes request and reads the response, with its body unless it is
// a 101. The response is nil when the connection closed without one.
func (c *Conn) Send(request string) (*http.Response, string) {
	if _, err := io.WriteString(c.Raw, request); err != nil {
		return nil, ""
	}
	resp, err := http.ReadResponse(c.Reader, nil)
	if err != nil {
		return nil, ""
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return resp, ""
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// Echo writes msg into the tunnel and reports whether the same bytes came
// back.
func (c *Conn) Echo(msg string) bool {
	if _, err := io.WriteString(c.Raw, msg); err != nil {
		return false
	}
	got := make([]byte, len(msg))
	_, err := io.ReadFull(c.Reader, got)
	return err == nil && string(got) == msg
}
