package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/internal/upgradetest"
)

// TestHostileUpgrades: against an upstream that accepts h2c, an h2c upgrade
// is served as plain HTTP/1.1, so a later request on the same connection
// still meets authentication and routing (401/404, never the upstream); a
// 101 from the upstream to a request that was not forwarded as an upgrade is
// a 502; a WebSocket handshake on a route with websocket: true tunnels, and
// is counted and logged once, with status 101.
func TestHostileUpgrades(t *testing.T) {
	up := upgradetest.NewUpstream(t)
	cfg := limiterConfig(up.URL, nil, "acme")
	cfg.Log = &logCfg{Level: "info"}
	cfg.route("plain", "GET", "/plain/{rest...}", 1)
	cfg.route("ws", "GET", "/ws/{rest...}", 1)
	cfg.Routes[len(cfg.Routes)-1].WebSocket = true
	gw := startGateway(t, "gw", cfg)
	get := func(path, headers string) string {
		return "GET " + path + " HTTP/1.1\r\nHost: gw\r\nX-API-Key: key-acme\r\n" + headers + "\r\n"
	}

	c := upgradetest.Dial(t, gw.Addr)
	for _, ask := range []string{upgradetest.H2C, upgradetest.H2CLenient} {
		if resp, body := c.Send(get("/plain/a", ask)); resp == nil || resp.StatusCode != 200 || body != "from HTTP/1.1" {
			t.Fatalf("h2c upgrade: %v %q, want the upstream's HTTP/1.1 200", resp, body)
		}
	}
	if resp, _ := c.Send("DELETE /internal/users/1 HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n"); resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a request without a credential after the h2c upgrade: %v, want the gateway's 401", resp)
	}
	if resp, _ := c.Send("DELETE /internal/users/1 HTTP/1.1\r\nHost: gw\r\nX-API-Key: key-acme\r\nContent-Length: 0\r\n\r\n"); resp == nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("an unrouted request after the h2c upgrade: %v, want the gateway's 404", resp)
	}
	_, _ = c.Send("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

	for _, req := range []string{
		get("/plain/101-h2c", ""),
		get("/plain/101-h2c", upgradetest.H2CLenient),
		get("/plain/101-websocket", upgradetest.WebSocket),
		get("/ws/101-h2c", upgradetest.WebSocket),
	} {
		resp, body := upgradetest.Dial(t, gw.Addr).Send(req)
		if resp == nil || resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, `"upstream_unavailable"`) {
			t.Errorf("%s: %v %q, want 502 upstream_unavailable", strings.SplitN(req, "\r\n", 2)[0], resp, body)
		}
	}
	if resp, body := upgradetest.Dial(t, gw.Addr).Send(get("/ws/x", upgradetest.H2CLenient)); resp == nil || resp.StatusCode != 200 {
		t.Errorf("h2c on a WebSocket route: %v %q, want the upstream's plain 200", resp, body)
	}

	c = upgradetest.Dial(t, gw.Addr)
	resp, _ := c.Send(get("/ws/101-websocket", upgradetest.WebSocket))
	if resp == nil || resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != upgradetest.WebSocketAccept {
		t.Fatalf("WebSocket handshake on a websocket route: %v", resp)
	}
	if !c.Echo("\x81\x05hello") {
		t.Fatal("the WebSocket tunnel does not carry bytes both ways")
	}
	c.Raw.Close()
	gw.waitMetric(10*time.Second, 1, "quotagate_requests_total", "route=ws", "code=101")
	if n := gw.metric("quotagate_requests_total", "route=ws"); n != 3 {
		t.Errorf("requests of route ws counted %v, want 3 (one 502, one 200, one 101)", n)
	}
	// Access lines reach the log a flush interval after their request.
	if _, ok := gw.logs.WaitLine(`"route":"ws","status":101`, 10*time.Second); !ok {
		proctest.Overrun(t, "no access line with route ws and status 101 within 10s")
	} else if n := gw.logs.Count(`"route":"ws","status":101`); n != 1 {
		t.Errorf("%d access lines with route ws and status 101, want 1", n)
	}

	for _, r := range up.Requests() {
		if strings.Contains(r.Path, "/internal/") || r.Proto != "HTTP/1.1" || r.Header.Get("Upgrade") == "h2c" || r.Header.Get("Http2-Settings") != "" {
			t.Errorf("the upstream received %s %s %s upgrade=%q", r.Method, r.Path, r.Proto, r.Header.Get("Upgrade"))
		}
	}
}
