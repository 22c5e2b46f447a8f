package gateway

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/internal/upgradetest"
)

// upgradeConfig adds to baseConfig a WebSocket route and two routes that do
// not allow upgrades (POST never upgrades); none has limits.
const upgradeConfig = baseConfig + `  - {name: ws, method: GET, path: "/v1/ws/{to}", upstream: patient, websocket: true}
  - {name: plain, method: GET, path: "/v1/plain/{to}", upstream: patient}
  - {name: ws.post, method: POST, path: "/v1/ws/{to}", upstream: patient, websocket: true}
`

// upgradeFixture serves baseConfig's gateway with upgradeConfig's routes in
// front of an upgradetest.Upstream, logging as JSON to logs when not nil.
func upgradeFixture(t *testing.T, logs io.Writer) (up *upgradetest.Upstream, pub string) {
	f := newFixture(t, baseConfig)
	up = upgradetest.NewUpstream(t)
	f.useUpstream(t, upgradeConfig, up.URL)
	if logs != nil {
		f.gw.opts.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	}
	pub, _, _ = f.serve(t)
	return up, pub
}

// get is a raw GET of path by the caller with freeKey, with extra header lines.
func get(path, headers string) string {
	return "GET " + path + " HTTP/1.1\r\nHost: gw\r\nX-API-Key: " + freeKey + "\r\n" + headers + "\r\n"
}

// TestH2CUpgradeCannotTunnelPastTheGateway runs a real upstream that accepts
// the h2c upgrade, leniently (HTTP2-Settings need not be named in
// Connection, which the reverse proxy would have emptied). The caller's
// upgrade is served as plain HTTP/1.1, so the connection stays the
// gateway's: a later request on it without a credential to an unrouted path
// is answered by the gateway (404), and an HTTP/2 preface never reaches the
// upstream.
func TestH2CUpgradeCannotTunnelPastTheGateway(t *testing.T) {
	up, pub := upgradeFixture(t, nil)
	c := upgradetest.Dial(t, pub)
	for _, req := range []string{get("/v1/plain/x", upgradetest.H2C), get("/v1/plain/y", upgradetest.H2CLenient)} {
		if resp, body := c.Send(req); resp == nil || resp.StatusCode != http.StatusOK || body != "from HTTP/1.1" {
			t.Fatalf("%q: %v %q, want the upstream's HTTP/1.1 200", strings.SplitN(req, "\r\n", 2)[0], resp, body)
		}
	}
	resp, body := c.Send("DELETE /internal/users/1 HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n")
	if resp == nil || resp.StatusCode != http.StatusNotFound || !strings.Contains(body, `"no_route"`) {
		t.Fatalf("second request on the connection: %v %q, want the gateway's 404", resp, body)
	}
	// An HTTP/2 connection preface: the gateway's HTTP/1.1 server refuses
	// it (or closes); nothing reaches the upstream.
	_, _ = c.Send("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")

	// An h2c upgrade is no WebSocket, on a WebSocket route too.
	if resp, body := upgradetest.Dial(t, pub).Send(get("/v1/ws/x", upgradetest.H2CLenient)); resp == nil || resp.StatusCode != http.StatusOK || body != "from HTTP/1.1" {
		t.Fatalf("h2c upgrade on a WebSocket route: %v %q, want the upstream's HTTP/1.1 200", resp, body)
	}
	var got []string
	for _, r := range up.Requests() {
		got = append(got, r.Method+" "+r.Path+" "+r.Proto+" upgrade="+r.Header.Get("Upgrade")+" tenant="+r.Header.Get("X-Quotagate-Tenant"))
	}
	want := []string{
		"GET /v1/plain/x HTTP/1.1 upgrade= tenant=acme",
		"GET /v1/plain/y HTTP/1.1 upgrade= tenant=acme",
		"GET /v1/ws/x HTTP/1.1 upgrade= tenant=acme",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the upstream received\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestUnpermittedSwitchIs502: an upstream that answers 101 to a request the
// gateway did not forward as an upgrade gets no tunnel; the caller gets a
// 502 problem+json and the connection stays the gateway's.
func TestUnpermittedSwitchIs502(t *testing.T) {
	_, pub := upgradeFixture(t, nil)
	for _, req := range []string{
		get("/v1/plain/101-websocket", ""),
		get("/v1/plain/101-h2c", upgradetest.H2C),
		get("/v1/plain/101-websocket", upgradetest.WebSocket),
		get("/v1/plain/101-", ""),
		get("/v1/ws/101-h2c", upgradetest.WebSocket),
		"POST /v1/ws/101-websocket HTTP/1.1\r\nHost: gw\r\nX-API-Key: " + freeKey + "\r\nContent-Length: 0\r\n" + upgradetest.WebSocket + "\r\n",
	} {
		c := upgradetest.Dial(t, pub)
		resp, body := c.Send(req)
		if resp == nil || resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, `"upstream_unavailable"`) {
			t.Errorf("%q: %v %q, want 502 upstream_unavailable", strings.SplitN(req, "\r\n", 2)[0], resp, body)
			continue
		}
		if resp, _ := c.Send(get("/v1/plain/ok", "")); resp != nil && resp.StatusCode != http.StatusOK {
			t.Errorf("after the 502, the connection answered %d", resp.StatusCode)
		}
	}
}

// TestWebSocketOnAWebSocketRoute: the handshake on a route with websocket:
// true gets the upstream's 101 and a tunnel; it is counted once, and its
// access line records 101. The same handshake on another route reaches the
// upstream as a plain GET.
func TestWebSocketOnAWebSocketRoute(t *testing.T) {
	logs := &lockedBuffer{}
	up, pub := upgradeFixture(t, logs)

	c := upgradetest.Dial(t, pub)
	resp, _ := c.Send(get("/v1/ws/101-websocket", upgradetest.WebSocket))
	if resp == nil || resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != upgradetest.WebSocketAccept {
		t.Fatalf("handshake: %v", resp)
	}
	if !c.Echo("\x81\x05hello") || !c.Echo("\x81\x05again") {
		t.Fatal("the tunnel does not carry bytes both ways")
	}
	c.Raw.Close()
	deadline := time.Now().Add(waitFor)
	for !strings.Contains(logs.String(), `"route":"ws","status":101`) {
		if time.Now().After(deadline) {
			proctest.FatalOverrun(t, "no access line with status 101 within %v of the tunnel closing:\n%s", waitFor, logs.String())
		}
		time.Sleep(5 * time.Millisecond) // the line is written when the tunnel's copy ends
	}
	if n := strings.Count(logs.String(), `"msg":"request"`); n != 1 {
		t.Errorf("%d access lines for one WebSocket, want 1:\n%s", n, logs.String())
	}

	resp, body := upgradetest.Dial(t, pub).Send(get("/v1/plain/ok", upgradetest.WebSocket))
	if resp == nil || resp.StatusCode != http.StatusOK || body != "from HTTP/1.1" {
		t.Fatalf("handshake on a route without websocket: %v %q, want the plain 200", resp, body)
	}
	seen := up.Requests()
	if len(seen) != 2 || seen[0].Header.Get("Upgrade") != "websocket" || seen[1].Header.Get("Upgrade") != "" {
		t.Errorf("the upstream received %+v, want the handshake, then a plain GET", seen)
	}
}

// lockedBuffer is a strings.Builder safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestWebSocketMetrics: a WebSocket is one request with code 101, and its
// tunnel's life is not an upstream duration.
func TestWebSocketMetrics(t *testing.T) {
	o := newObservedFixture(t)
	up := upgradetest.NewUpstream(t)
	o.useUpstream(t, upgradeConfig, up.URL)
	pub, _, _ := o.serve(t)
	c := upgradetest.Dial(t, pub)
	if resp, _ := c.Send(get("/v1/ws/101-websocket", upgradetest.WebSocket)); resp == nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %v", resp)
	}
	c.Raw.Close()
	want := `quotagate_requests_total{code="101",route="ws"} 1`
	var body string
	for deadline := time.Now().Add(waitFor); ; {
		rec := httptest.NewRecorder()
		o.metrics.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if body = rec.Body.String(); strings.Contains(body, want) {
			break
		}
		if time.Now().After(deadline) {
			proctest.FatalOverrun(t, "no %s within %v of the tunnel closing:\n%s", want, waitFor, body)
		}
		time.Sleep(5 * time.Millisecond) // the request is recorded when the tunnel's copy ends
	}
	if !strings.Contains(body, `quotagate_upstream_duration_seconds_count{route="ws"} 0`) {
		t.Errorf("the tunnel was recorded as an upstream duration")
	}
	if n := strings.Count(body, `route="ws"} 1`); n != 1 {
		t.Errorf("%d series of route ws at 1, want only the 101 request", n)
	}
}
