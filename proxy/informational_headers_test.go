package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
)

// TestInformationalKeepsCallersHeaders: the headers the handler's caller
// set before forwarding (the gateway's X-Request-Id and RateLimit
// headers) reach the client on the final response after an upstream's
// 103, and the 103's own headers do not, over direct exchanges and over
// net/http's Transport.
func TestInformationalKeepsCallersHeaders(t *testing.T) {
	up := newScripted(t, func(conn, req int, r *http.Request, w *bufio.Writer) bool {
		io.WriteString(w, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
		io.WriteString(w, "HTTP/1.1 200 OK\r\nX-Up: 1\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
	u, err := url.Parse(up.url())
	if err != nil {
		t.Fatal(err)
	}
	direct, _ := directTransport(t, nil)
	std := NewTransport(TransportOptions{NoDirect: true})
	t.Cleanup(std.CloseIdleConnections) // before the upstream waits for its connections
	for _, tc := range []struct {
		name      string
		transport http.RoundTripper
	}{
		{"direct", direct},
		{"net/http", std},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := newHandler(Upstream{Name: "up", URL: u}, Options{Transport: tc.transport}, stdAfterFunc)
			if err != nil {
				t.Fatal(err)
			}
			front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Request-Id", "req-1")
				w.Header().Set("Ratelimit", `"tenant";r=4;t=1`)
				h.ServeHTTP(w, r)
			}))
			defer front.Close()
			early, final := rawExchange(t, front.URL)
			if !strings.HasPrefix(early, "HTTP/1.1 103 ") || !strings.Contains(early, "Link: </a.css>") {
				t.Fatalf("first response %q, want the 103 with its Link", early)
			}
			if !strings.HasPrefix(final, "HTTP/1.1 200 ") || !strings.Contains(final, "X-Up: 1") {
				t.Fatalf("final response %q, want the upstream's 200", final)
			}
			if strings.Contains(final, "Link:") {
				t.Errorf("final response %q carries the 103's Link", final)
			}
			if !strings.Contains(final, "X-Request-Id: req-1") || !strings.Contains(final, `Ratelimit: "tenant";r=4;t=1`) {
				t.Errorf("final response %q lacks the caller's headers", final)
			}
		})
	}
}

// rawExchange sends a GET to base over a raw connection and returns the
// heads of the first and the final response.
func rawExchange(t *testing.T, base string) (early, final string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(waitFor)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, "GET /x HTTP/1.1\r\nHost: gw.example\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	readHead := func() string {
		var b strings.Builder
		for {
			line, err := br.ReadString('\n')
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				proctest.FatalOverrun(t, "no response head within %v (so far %q)", waitFor, b.String())
			}
			if err != nil {
				t.Fatalf("reading a response head: %v (so far %q)", err, b.String())
			}
			if line == "\r\n" {
				return b.String()
			}
			b.WriteString(line)
		}
	}
	return readHead(), readHead()
}
