package e2e

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// rawResponse is one response read off a raw connection.
type rawResponse struct {
	status int
	header http.Header
	body   string
}

// rawExchange writes payload to a new connection to addr in one write and
// reads up to n responses in order, each bounded by timeout. It stops early
// when the server closes the connection; closed reports whether it did.
// Raw connections send what net/http's client would refuse or rewrite.
func rawExchange(t *testing.T, addr, payload string, n int, timeout time.Duration) (resps []rawResponse, closed bool) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, payload); err != nil {
		t.Fatalf("write: %v", err)
	}
	br := bufio.NewReader(conn)
	for range n {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Errorf("no response within %v (after %d responses)", timeout, len(resps))
				return resps, false
			}
			return resps, true
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Errorf("reading response body: %v", err)
		}
		resps = append(resps, rawResponse{status: resp.StatusCode, header: resp.Header, body: string(b)})
		if resp.Close {
			return resps, true
		}
	}
	return resps, false
}

// rawStatus sends one raw request and returns its status (0 when the
// connection closed without a response).
func rawStatus(t *testing.T, addr, payload string) rawResponse {
	t.Helper()
	resps, _ := rawExchange(t, addr, payload, 1, 5*time.Second)
	if len(resps) == 0 {
		return rawResponse{}
	}
	return resps[0]
}

// healthy asserts that the gateway's /healthz answers 200 and a normal
// request is still served.
func healthy(t *testing.T, gw *gateway, key string) {
	t.Helper()
	if s := readyzStatus(gw); s != 200 {
		t.Errorf("/readyz answered %d after the hostile input, want 200", s)
	}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(gw.Admin + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("/healthz after the hostile input: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	client := newClient(1)
	defer client.CloseIdleConnections()
	if o := do(client, call{base: gw.URL, path: "/ok/after", key: key}, false); o.status != 200 {
		t.Errorf("a normal request after the hostile input answered %d (%v), want 200", o.status, o.err)
	}
}
