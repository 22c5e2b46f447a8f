package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Limits of the hostile-input gateway.
const (
	hostileMaxHeader = 8192
	hostileMaxBody   = 1024
)

// startHostile starts one gateway for hostile input: read_header_timeout 1s,
// max_header_bytes 8192, max_body_bytes 1024, the API key "key-acme", no
// anonymous callers, and GET and POST /ok/{rest...} without limits.
func startHostile(t *testing.T, adjust ...func(*gwConfig)) (*gateway, *upstream) {
	t.Helper()
	up := startUpstream(t)
	cfg := limiterConfig(up.URL(), nil, "acme")
	cfg.Server.ReadHeaderTimeout = "1s"
	cfg.Server.MaxHeaderBytes = hostileMaxHeader
	cfg.Server.MaxBodyBytes = hostileMaxBody
	cfg.route("ok.get", "GET", "/ok/{rest...}", 1)
	cfg.route("ok.post", "POST", "/ok/{rest...}", 1)
	for _, f := range adjust {
		f(cfg)
	}
	return startGateway(t, "gw", cfg), up
}

// get builds a raw GET of path with extra header lines (each ending CRLF).
func get(path, headers string) string {
	return "GET " + path + " HTTP/1.1\r\nHost: gw\r\n" + headers + "\r\n"
}

// TestHostileAuthorization: malformed or wrong credentials are answered 401
// problem+json "unauthenticated" with WWW-Authenticate, never forwarded;
// header values the HTTP server itself refuses (control characters) are
// answered 400. The gateway stays healthy.
func TestHostileAuthorization(t *testing.T) {
	gw, up := startHostile(t)
	cases := []struct{ name, headers string }{
		{"no credential", ""},
		{"basic scheme", "Authorization: Basic a2V5LWFjbWU6eA==\r\n"},
		{"bearer without token", "Authorization: Bearer\r\n"},
		{"bearer with blank token", "Authorization: Bearer   \r\n"},
		{"token with a space", "Authorization: Bearer key acme\r\n"},
		{"unknown key", "Authorization: Bearer key-nobody\r\n"},
		{"scheme only garbage", "Authorization: ::::\r\n"},
		{"lowercase scheme, unknown key", "authorization: bearer key-nobody\r\n"},
		{"two Authorization headers", "Authorization: Bearer key-acme\r\nAuthorization: Bearer key-acme\r\n"},
		{"two X-API-Key headers", "X-API-Key: key-acme\r\nX-API-Key: key-acme\r\n"},
		{"conflicting credentials", "Authorization: Bearer key-acme\r\nX-API-Key: key-other\r\n"},
		{"empty X-API-Key", "X-API-Key: \r\n"},
		{"JWT-shaped garbage", "Authorization: Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJhY21lIn0.\r\n"},
		{"non-ASCII token", "Authorization: Bearer key-acm\xc3\xa9\r\n"},
		{"4 KiB token", "Authorization: Bearer " + strings.Repeat("k", 4096) + "\r\n"},
	}
	for _, c := range cases {
		r := rawStatus(t, gw.Addr, get("/ok/auth", c.headers))
		var p struct{ Error string }
		_ = json.Unmarshal([]byte(r.body), &p)
		if r.status != http.StatusUnauthorized || p.Error != "unauthenticated" || r.header.Get("Content-Type") != "application/problem+json" ||
			r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: %d %s %q, want 401 problem+json unauthenticated with WWW-Authenticate", c.name, r.status, r.header.Get("Content-Type"), r.body)
		}
	}
	for _, ctl := range []string{"\x00", "\x01", "\x7f"} {
		if r := rawStatus(t, gw.Addr, get("/ok/auth", "Authorization: Bearer key-"+ctl+"acme\r\n")); r.status != http.StatusBadRequest {
			t.Errorf("control character %q in Authorization: %d, want 400", ctl, r.status)
		}
	}
	if up.sawPath("/ok/auth") {
		t.Errorf("the upstream received a request with a bad credential")
	}
	healthy(t, gw, "key-acme")
}

// TestHostileUnknownKeys: 10,000 distinct unknown API keys are all answered
// 401, and the gateway's memory does not grow with them (a failed
// authentication keeps no per-key state): its live heap after a
// collection grows by less than 16 MiB.
func TestHostileUnknownKeys(t *testing.T) {
	const keys = 10000
	gw, up := startHostile(t, func(c *gwConfig) { c.Server.Pprof = true })
	// Warm the process up (connections, buffers) before the baseline.
	load{workers: 16, perWorker: 50, next: func(w, i int) call {
		return call{base: gw.URL, path: "/ok/warm", key: fmt.Sprintf("warm-%d-%d", w, i)}
	}}.run(t)
	before := gw.liveHeapKB()
	outs := load{workers: 16, perWorker: keys / 16, next: func(w, i int) call {
		return call{base: gw.URL, path: "/ok/unknown", key: fmt.Sprintf("unknown-key-%d-%d", w, i)}
	}}.run(t)
	after := gw.liveHeapKB()
	s := summarize(outs, nil)
	t.Logf("%d unknown keys: %s; live heap %d KiB → %d KiB", s.n, s.mix(), before, after)
	if s.n != keys || s.status[401] != keys {
		t.Errorf("unknown keys answered %s, want %d × 401", s.mix(), keys)
	}
	if grew := after - before; grew > 16<<10 {
		t.Errorf("live heap grew by %d KiB over %d unknown keys, want < 16 MiB", grew, keys)
	}
	if up.sawPath("/ok/unknown") {
		t.Error("the upstream received a request with an unknown key")
	}
	healthy(t, gw, "key-acme")
}

// TestHostileOversized: a header block over max_header_bytes is answered
// 431; a body over max_body_bytes is answered 413 problem+json
// payload_too_large, whether its Content-Length announces it or it arrives
// chunked. Nothing oversized reaches the upstream whole.
func TestHostileOversized(t *testing.T) {
	gw, up := startHostile(t)
	auth := "X-API-Key: key-acme\r\n"
	// net/http's server allows 4 KiB over MaxHeaderBytes; go well past it.
	big := get("/ok/big-header", auth+"X-Big: "+strings.Repeat("a", 2*hostileMaxHeader+4096)+"\r\n")
	if r := rawStatus(t, gw.Addr, big); r.status != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("oversized header: %d, want 431", r.status)
	}
	many := auth
	for i := range 2000 {
		many += "X-H" + strconv.Itoa(i) + ": v\r\n"
	}
	if r := rawStatus(t, gw.Addr, get("/ok/many-headers", many)); r.status != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("2000 headers: %d, want 431", r.status)
	}

	body := strings.Repeat("b", 4*hostileMaxBody)
	withLength := "POST /ok/big-body HTTP/1.1\r\nHost: gw\r\n" + auth + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	r := rawStatus(t, gw.Addr, withLength)
	var p struct{ Error string }
	_ = json.Unmarshal([]byte(r.body), &p)
	if r.status != http.StatusRequestEntityTooLarge || p.Error != "payload_too_large" {
		t.Errorf("body over max_body_bytes with Content-Length: %d %q, want 413 payload_too_large", r.status, r.body)
	}
	chunked := "POST /ok/big-chunked HTTP/1.1\r\nHost: gw\r\n" + auth + "Transfer-Encoding: chunked\r\n\r\n" +
		fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	r = rawStatus(t, gw.Addr, chunked)
	p.Error = ""
	_ = json.Unmarshal([]byte(r.body), &p)
	if r.status != http.StatusRequestEntityTooLarge || p.Error != "payload_too_large" {
		t.Errorf("chunked body over max_body_bytes: %d %q, want 413 payload_too_large", r.status, r.body)
	}
	for _, req := range up.requests() {
		if strings.HasPrefix(req.Path, "/ok/big") && req.BodyLen > hostileMaxBody {
			t.Errorf("the upstream received %s with %d body bytes", req.Path, req.BodyLen)
		}
		if strings.HasPrefix(req.Path, "/ok/big-body") || strings.HasPrefix(req.Path, "/ok/big-header") || strings.HasPrefix(req.Path, "/ok/many") {
			t.Errorf("the upstream received %s", req.Path)
		}
	}
	// A body within the limit still goes through.
	fits := "POST /ok/small HTTP/1.1\r\nHost: gw\r\n" + auth + "Content-Length: 10\r\n\r\n0123456789"
	if r := rawStatus(t, gw.Addr, fits); r.status != 200 {
		t.Errorf("a 10-byte body: %d, want 200", r.status)
	}
	healthy(t, gw, "key-acme")
}

// TestHostilePaths: invalid UTF-8, control characters, encoded separators,
// dot segments and very long paths never cause a 5xx: the HTTP server
// refuses what is not a valid request target (400, or 431/414 for a request
// line over the header limit) and the gateway answers 404 to what no route
// may match (the route table refuses paths the upstream could read as
// another route). None of them reaches the upstream, except a path that a
// catch-all route matches as it is, which the upstream receives unchanged.
func TestHostilePaths(t *testing.T) {
	gw, up := startHostile(t)
	auth := "X-API-Key: key-acme\r\n"
	cases := []struct {
		name, path string
		want       []int
	}{
		{"raw invalid UTF-8", "/\xff\xfe/x", []int{400, 404}},
		// Under a catch-all route the path is forwarded as it came: the
		// upstream sees the same bytes the route was matched on.
		{"raw invalid UTF-8 under a route", "/ok/\xff\xfe", []int{200, 400, 404}},
		{"encoded invalid UTF-8", "/v1/%ff%fe", []int{404}},
		{"raw control character", "/ok/a\x01b", []int{400}},
		{"raw DEL", "/ok/a\x7fb", []int{400, 404}},
		{"encoded NUL", "/ok/a%00b", []int{400, 404}},
		{"encoded control character", "/ok/%0d%0aSet-Cookie:x", []int{400, 404}},
		{"dot-dot segment", "/ok/../admin", []int{400, 404}},
		{"encoded dot-dot", "/ok/%2e%2e/admin", []int{400, 404}},
		{"encoded slash", "/ok/a%2fb", []int{404}},
		{"backslash", "/ok/a\\..\\b", []int{400, 404}},
		{"empty segment", "/ok//x", []int{404}},
		{"bad percent-encoding", "/ok/%zz", []int{400, 404}},
		{"asterisk form", "*", []int{400, 404}},
		{"absolute form to another host", "http://evil.example/ok/x", []int{200, 400, 404}},
		{"7 KiB path", "/zz/" + strings.Repeat("a", 7<<10), []int{404}},
		{"7 KiB path under a route", "/ok/" + strings.Repeat("a/", 3<<10), []int{404}},
		{"64 KiB path", "/zz/" + strings.Repeat("a", 64<<10), []int{414, 431}},
	}
	for _, c := range cases {
		r := rawStatus(t, gw.Addr, get(c.path, auth))
		ok := false
		for _, w := range c.want {
			ok = ok || r.status == w
		}
		if !ok {
			t.Errorf("%s: answered %d, want one of %v", c.name, r.status, c.want)
		}
	}
	for _, req := range up.requests() {
		// Only the absolute-form request (/ok/x) and the catch-all one may
		// have been forwarded, unchanged.
		if req.Path != "/ok/x" && req.Path != "/ok/\xff\xfe" {
			t.Errorf("the upstream received %q", truncate(req.Path, 80))
		}
	}
	healthy(t, gw, "key-acme")
}

// TestHostileSlowloris: connections that send their headers a byte at a
// time are closed once read_header_timeout (1 s) has passed since they
// opened, and the gateway serves normal requests meanwhile.
func TestHostileSlowloris(t *testing.T) {
	const conns = 40
	gw, _ := startHostile(t)
	type result struct {
		after time.Duration
		err   error
	}
	results := make(chan result, conns)
	start := time.Now()
	for i := range conns {
		go func() { results <- slowHeaders(gw.Addr, i, 200*time.Millisecond, 5*time.Second) }()
	}
	// A normal client is served while the slow ones hold connections.
	healthy(t, gw, "key-acme")
	var worst time.Duration
	for range conns {
		r := <-results
		if r.err != nil {
			t.Errorf("slow connection: %v", r.err)
			continue
		}
		worst = max(worst, r.after)
		if r.after < 900*time.Millisecond || r.after > 3*time.Second {
			t.Errorf("slow connection closed after %v, want about read_header_timeout (1 s)", r.after)
		}
	}
	t.Logf("%d slow connections, all closed within %v (test took %v)", conns, worst.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	healthy(t, gw, "key-acme")
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
