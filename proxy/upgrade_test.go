package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/upgradetest"
)

// TestOnlyPermittedWebSocketUpgradesAreForwarded: a request asking for any
// upgrade but a permitted WebSocket handshake reaches the upstream as plain
// HTTP/1.1, without Upgrade, Connection and HTTP2-Settings.
func TestOnlyPermittedWebSocketUpgradesAreForwarded(t *testing.T) {
	up := upgradetest.NewUpstream(t)
	allow := func(r *http.Request) bool { return r.URL.Query().Get("allow") == "1" }
	f := newFixture(t, up.URL, 0, nil, func(o *testOptions) { o.AllowUpgrade = allow })
	nilAllow := newFixture(t, up.URL, 0, nil)
	cases := []struct {
		name    string
		front   *fixture
		request string
		forward bool // the upstream sees the WebSocket upgrade
	}{
		{"h2c", f, "GET /?allow=1 HTTP/1.1\r\nHost: x\r\n" + upgradetest.H2C + "\r\n", false},
		{"h2c, HTTP2-Settings not in Connection", f, "GET /?allow=1 HTTP/1.1\r\nHost: x\r\n" + upgradetest.H2CLenient + "\r\n", false},
		{"h2c token in any case", f, "GET /?allow=1 HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: H2C\r\n\r\n", false},
		{"HTTP2-Settings without Connection", f, "GET /?allow=1 HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n", false},
		{"unknown token", f, "GET /?allow=1 HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: tls/1.3\r\n\r\n", false},
		{"two tokens", f, "GET /?allow=1 HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket, h2c\r\n\r\n", false},
		{"WebSocket not permitted", f, "GET /?allow=0 HTTP/1.1\r\nHost: x\r\n" + upgradetest.WebSocket + "\r\n", false},
		{"WebSocket without AllowUpgrade", nilAllow, "GET /?allow=1 HTTP/1.1\r\nHost: x\r\n" + upgradetest.WebSocket + "\r\n", false},
		{"WebSocket with POST", f, "POST /?allow=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n" + upgradetest.WebSocket + "\r\n", false},
		{"WebSocket over HTTP/1.0", f, "GET /?allow=1 HTTP/1.0\r\nHost: x\r\n" + upgradetest.WebSocket + "\r\n", false},
		{"permitted WebSocket", f, "GET /?allow=1 HTTP/1.1\r\nHost: x\r\n" + upgradetest.WebSocket + "\r\n", true},
	}
	for i, c := range cases {
		resp, body := upgradetest.Dial(t, c.front.front.URL).Send(c.request)
		seen := up.Requests()
		if len(seen) != i+1 || resp == nil {
			t.Fatalf("%s: response %v; the upstream received %d requests, want %d", c.name, resp, len(seen), i+1)
		}
		h := seen[i].Header
		if c.forward {
			if h.Get("Upgrade") != "websocket" || h.Get("Connection") != "Upgrade" {
				t.Errorf("%s: upstream Upgrade %q Connection %q, want the handshake", c.name, h.Get("Upgrade"), h.Get("Connection"))
			}
			continue
		}
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(body, "from HTTP/1.") {
			t.Errorf("%s: %d %q, want the upstream's plain 200", c.name, resp.StatusCode, body)
		}
		for _, k := range []string{"Upgrade", "Connection", "Http2-Settings"} {
			if v := h.Values(k); len(v) != 0 {
				t.Errorf("%s: upstream received %s %q", c.name, k, v)
			}
		}
	}
}

// TestUnaskedSwitchIs502: an upstream answering 101 to a request that was
// not forwarded as an upgrade gets no tunnel: the client gets a 502 through
// the error funnel, whatever Upgrade the 101 names (none, h2c, websocket),
// and so does a 101 naming another protocol than the permitted WebSocket
// handshake asked for. The upstream had the request: OnFailure hears that
// it was written, with or without an upstream timeout.
func TestUnaskedSwitchIs502(t *testing.T) {
	up := upgradetest.NewUpstream(t)
	for _, timeout := range []time.Duration{0, time.Minute} {
		t.Run(fmt.Sprint("timeout ", timeout), func(t *testing.T) { unaskedSwitch(t, up.URL, timeout) })
	}
}

func unaskedSwitch(t *testing.T, upstream string, timeout time.Duration) {
	fl := &failures{}
	f := newFixture(t, upstream, timeout, nil, func(o *testOptions) {
		o.AllowUpgrade = func(*http.Request) bool { return true }
		o.OnFailure = fl.add
	})
	requests := []string{
		"GET /101-h2c HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /101- HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /101-websocket HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /101-h2c HTTP/1.1\r\nHost: x\r\n" + upgradetest.H2C + "\r\n",
		"POST /101-websocket HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n" + upgradetest.WebSocket + "\r\n",
		"GET /101-h2c HTTP/1.1\r\nHost: x\r\n" + upgradetest.WebSocket + "\r\n",
	}
	for i, req := range requests {
		resp, body := upgradetest.Dial(t, f.front.URL).Send(req)
		if resp == nil || resp.StatusCode != http.StatusBadGateway {
			t.Errorf("request %d: %v %q, want 502", i, resp, body)
		}
		f.waitServed(t)
		if errs := f.errs.get(); len(errs) != i+1 || errs[i] != (errorCall{http.StatusBadGateway, CodeUnavailable}) {
			t.Errorf("request %d: WriteError calls %v", i, errs)
		}
		if got := fl.get(); len(got) != i+1 || got[i] != (failure{http.StatusBadGateway, true}) {
			t.Errorf("request %d: OnFailure calls %v, want the last {502 true}", i, got)
		}
	}
}

// TestPermittedWebSocketTunnels: a permitted handshake gets the upstream's
// 101 and a working tunnel in both directions.
func TestPermittedWebSocketTunnels(t *testing.T) {
	up := upgradetest.NewUpstream(t)
	f := newFixture(t, up.URL, 0, nil, func(o *testOptions) { o.AllowUpgrade = func(*http.Request) bool { return true } })
	c := upgradetest.Dial(t, f.front.URL)
	resp, _ := c.Send("GET /101-websocket HTTP/1.1\r\nHost: x\r\n" + upgradetest.WebSocket + "\r\n")
	if resp == nil || resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != upgradetest.WebSocketAccept {
		t.Fatalf("handshake: %v", resp)
	}
	if !c.Echo("\x81\x05hello") || !c.Echo("\x81\x05again") {
		t.Fatal("the tunnel does not carry bytes both ways")
	}
	if len(f.errs.get()) != 0 {
		t.Errorf("WriteError called: %v", f.errs.get())
	}
}
