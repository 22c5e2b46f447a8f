package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// slowHeaders opens a connection and sends a request's header lines one
// every interval, never ending the header block. It returns how long after
// opening the server closed the connection (a 408 answer counts as
// closing), or an error if it stayed open for limit.
func slowHeaders(addr string, id int, interval, limit time.Duration) (r struct {
	after time.Duration
	err   error
}) {
	start := time.Now()
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		r.err = err
		return r
	}
	defer conn.Close()
	closed := make(chan struct{})
	go func() {
		// Reads return when the server answers or closes.
		_ = conn.SetReadDeadline(start.Add(limit))
		_, _ = io.Copy(io.Discard, conn)
		close(closed)
	}()
	if _, err := fmt.Fprintf(conn, "GET /ok/slow-%d HTTP/1.1\r\nHost: gw\r\n", id); err != nil {
		r.err = err
		return r
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-closed:
			r.after = time.Since(start)
			if r.after >= limit {
				r.err = fmt.Errorf("connection still open after %v", limit)
			}
			return r
		case <-tick.C:
			// A write error means the server has closed; the reader sees it.
			_, _ = fmt.Fprintf(conn, "X-Slow-%d: x\r\n", i)
		}
	}
}

// TestHostilePipelining: several requests written in one go on one
// connection (HTTP/1.1 pipelining) are all answered, in order, each with
// its own request id, and reach the upstream in order.
func TestHostilePipelining(t *testing.T) {
	gw, up := startHostile(t)
	var payload strings.Builder
	ids := []string{"pipe-1", "pipe-2", "pipe-3", "pipe-4"}
	for i, id := range ids {
		if i == 2 { // one POST with a body among the GETs
			fmt.Fprintf(&payload, "POST /ok/%s HTTP/1.1\r\nHost: gw\r\nX-API-Key: key-acme\r\nX-Request-ID: %s\r\nContent-Length: 5\r\n\r\nhello", id, id)
			continue
		}
		fmt.Fprintf(&payload, "GET /ok/%s HTTP/1.1\r\nHost: gw\r\nX-API-Key: key-acme\r\nX-Request-ID: %s\r\n\r\n", id, id)
	}
	resps, _ := rawExchange(t, gw.Addr, payload.String(), len(ids), 5*time.Second)
	if len(resps) != len(ids) {
		t.Fatalf("%d pipelined requests, %d answers", len(ids), len(resps))
	}
	for i, r := range resps {
		if r.status != 200 || r.header.Get("X-Request-ID") != ids[i] {
			t.Errorf("answer %d: %d with X-Request-ID %q, want 200 for %s", i, r.status, r.header.Get("X-Request-ID"), ids[i])
		}
	}
	var seen []string
	for _, r := range up.requests() {
		seen = append(seen, strings.TrimPrefix(r.Path, "/ok/"))
	}
	if strings.Join(seen, ",") != strings.Join(ids, ",") {
		t.Errorf("upstream saw %v, want %v in order", seen, ids)
	}
	healthy(t, gw, "key-acme")
}

// TestHostileSmuggling: requests whose framing two HTTP parsers could read
// differently. Go's server refuses conflicting Content-Lengths and unknown
// or repeated transfer codings (400 or 501); with both Content-Length and
// Transfer-Encoding: chunked it follows the chunked framing, as RFC 9112
// requires, drops Content-Length and forwards a re-framed body. In every
// case the bytes after the first request are either refused or parsed by
// the gateway as a request of their own (authenticated and routed like any
// other): the upstream never receives a request the gateway did not see.
func TestHostileSmuggling(t *testing.T) {
	gw, up := startHostile(t)
	const smuggled = "GET /ok/smuggled HTTP/1.1\r\nHost: gw\r\n\r\n" // no credential: the gateway would answer 401
	head := "POST /ok/front HTTP/1.1\r\nHost: gw\r\nX-API-Key: key-acme\r\n"
	cases := []struct {
		name    string
		payload string
		first   []int // acceptable statuses of the first answer
		answers int   // answers to read: 2 when the tail is a request of its own
	}{
		{"CL.TE: Content-Length and chunked", head + "Content-Length: 44\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled, []int{200, 400}, 2},
		{"TE.CL: chunked body hiding a request", head + "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(smuggled), smuggled), []int{200, 400}, 1},
		{"duplicate differing Content-Length", head + "Content-Length: 0\r\nContent-Length: 44\r\n\r\n" + smuggled, []int{400}, 1},
		{"Content-Length list", head + "Content-Length: 0, 44\r\n\r\n" + smuggled, []int{400}, 1},
		{"signed Content-Length", head + "Content-Length: +44\r\n\r\n" + smuggled, []int{400}, 1},
		{"unknown transfer coding", head + "Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n" + smuggled, []int{400, 501}, 1},
		{"two transfer codings", head + "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n" + smuggled, []int{400, 501}, 1},
		{"space before colon", head + "Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n" + smuggled, []int{400}, 1},
		// Go unfolds obs-fold into one value (RFC 9112 allows replacing it
		// with a space), so the framing is chunked for gateway and upstream.
		{"obs-fold transfer coding", head + "Transfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n" + smuggled, []int{200, 400, 501}, 2},
		{"bare LF line endings", strings.ReplaceAll(head, "\r\n", "\n") + "Content-Length: 0\n\n" + smuggled, []int{200, 400}, 2},
	}
	for _, c := range cases {
		resps, _ := rawExchange(t, gw.Addr, c.payload, c.answers, 5*time.Second)
		if len(resps) == 0 {
			t.Errorf("%s: no answer", c.name)
			continue
		}
		ok := false
		for _, w := range c.first {
			ok = ok || resps[0].status == w
		}
		if !ok {
			t.Errorf("%s: first answer %d, want one of %v", c.name, resps[0].status, c.first)
		}
		// If the gateway read a second request, it treated it as one: no
		// credential, 401.
		if len(resps) > 1 && resps[1].status != http.StatusUnauthorized {
			t.Errorf("%s: second answer %d, want 401 for the uncredentialed request", c.name, resps[1].status)
		}
		statuses := []int{}
		for _, r := range resps {
			statuses = append(statuses, r.status)
		}
		t.Logf("%s: answers %v", c.name, statuses)
	}
	for _, r := range up.requests() {
		if strings.Contains(r.Path, "smuggled") {
			t.Errorf("the upstream received a smuggled request: %s %s", r.Method, r.Path)
		}
		if r.Path == "/ok/front" && r.BodyLen != 0 && r.BodyLen != len(smuggled) {
			t.Errorf("the upstream received /ok/front with a %d-byte body", r.BodyLen)
		}
	}
	healthy(t, gw, "key-acme")
}

// TestHostileMalformedChunks: a chunked body whose framing breaks mid-way
// (an invalid chunk size) is the client's fault: the gateway answers a 4xx,
// never a 5xx, and stays healthy.
func TestHostileMalformedChunks(t *testing.T) {
	gw, _ := startHostile(t)
	payload := "POST /ok/chunks HTTP/1.1\r\nHost: gw\r\nX-API-Key: key-acme\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"5\r\nhello\r\nzz\r\nnot a chunk\r\n0\r\n\r\n"
	conn, err := net.DialTimeout("tcp", gw.Addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, payload); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		t.Errorf("no answer to a malformed chunked body within 5 s")
	case err != nil:
		t.Logf("connection closed without an answer: %v", err)
	default:
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("malformed chunked body: %d %s", resp.StatusCode, b)
		if resp.StatusCode < 400 || resp.StatusCode >= 500 {
			t.Errorf("malformed chunked body answered %d %s, want a 4xx (the client's fault)", resp.StatusCode, b)
		}
	}
	healthy(t, gw, "key-acme")
}
