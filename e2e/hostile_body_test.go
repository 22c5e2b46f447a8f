package e2e

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestHostileBodyAtTheLimit: a body of exactly max_body_bytes is forwarded
// whole and answered by the upstream (with a Content-Length or chunked); one
// byte more is answered 413 problem+json payload_too_large, before the
// upstream is contacted when a Content-Length declares it, and with the
// upstream's read of the chunked body failing (it never receives a complete
// request it could act on) when it arrives chunked. None of it is logged as
// an upstream failure.
func TestHostileBodyAtTheLimit(t *testing.T) {
	gw, up := startHostile(t)
	auth := "X-API-Key: key-acme\r\n"
	withLength := func(path string, n int) string {
		return "POST " + path + " HTTP/1.1\r\nHost: gw\r\n" + auth + "Content-Length: " + strconv.Itoa(n) + "\r\n\r\n" + strings.Repeat("b", n)
	}
	chunked := func(path string, n, piece int) string {
		s := "POST " + path + " HTTP/1.1\r\nHost: gw\r\n" + auth + "Transfer-Encoding: chunked\r\n\r\n"
		for left := n; left > 0; left -= piece {
			k := min(piece, left)
			s += fmt.Sprintf("%x\r\n%s\r\n", k, strings.Repeat("b", k))
		}
		return s + "0\r\n\r\n"
	}
	for name, req := range map[string]string{
		"/ok/exact-length":  withLength("/ok/exact-length", hostileMaxBody),
		"/ok/exact-chunked": chunked("/ok/exact-chunked", hostileMaxBody, 100),
	} {
		if r := rawStatus(t, gw.Addr, req); r.status != http.StatusOK || r.body != "ok" {
			t.Errorf("%s: %d %q, want the upstream's 200", name, r.status, r.body)
		}
		seen := waitSeen(t, up, name)
		if seen.BodyLen != hostileMaxBody || seen.BodyErr != "" {
			t.Errorf("%s: the upstream read %d bytes (%s), want all %d", name, seen.BodyLen, seen.BodyErr, hostileMaxBody)
		}
	}

	over := map[string]string{
		"/ok/over-length":        withLength("/ok/over-length", hostileMaxBody+1),
		"/ok/over-chunked-one":   chunked("/ok/over-chunked-one", hostileMaxBody+1, hostileMaxBody+1),
		"/ok/over-chunked-small": chunked("/ok/over-chunked-small", hostileMaxBody+1, 100),
		"/ok/over-chunked-far":   chunked("/ok/over-chunked-far", 8*hostileMaxBody, 100),
	}
	for name, req := range over {
		r := rawStatus(t, gw.Addr, req)
		if r.status != http.StatusRequestEntityTooLarge || r.header.Get("Content-Type") != "application/problem+json" ||
			!strings.Contains(r.body, `"payload_too_large"`) {
			t.Errorf("%s: %d %q, want 413 problem+json payload_too_large", name, r.status, r.body)
		}
	}
	if up.sawPath("/ok/over-length") {
		t.Errorf("a body whose Content-Length exceeds the limit reached the upstream")
	}
	for name := range over {
		if name == "/ok/over-length" {
			continue
		}
		// The gateway sends the headers of a chunked body before the body,
		// so the upstream sees the request start and then lose its body.
		seen := waitSeen(t, up, name)
		if seen.BodyErr == "" || seen.BodyLen > hostileMaxBody {
			t.Errorf("%s: the upstream read %d bytes, error %q: want an incomplete body of at most %d bytes",
				name, seen.BodyLen, seen.BodyErr, hostileMaxBody)
		}
	}
	// An oversized body is the caller's doing: no warning that blames the
	// upstream (a caller could flood the log with them).
	if n := gw.logs.count("upstream exchange failed"); n != 0 {
		t.Errorf("%d warnings of a failed upstream exchange for oversized bodies, want 0", n)
	}
	healthy(t, gw, "key-acme")
}

// waitSeen returns the upstream's record of the request to path, waiting for
// the upstream to finish reading it.
func waitSeen(t *testing.T, up *upstream, path string) seenRequest {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, r := range up.requests() {
			if r.Path == path {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the upstream never finished reading %s (a missed deadline, not a wrong answer)", path)
		}
		time.Sleep(10 * time.Millisecond) // polling another process's upstream
	}
}
