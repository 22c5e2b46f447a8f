package gateway

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/upgradetest"
)

// TestConcurrencySlotHeldForWebSocketLifetime: a WebSocket holds its slot
// while its tunnel is open, so a second request is refused 429; closing
// the tunnel gives the slot back.
func TestConcurrencySlotHeldForWebSocketLifetime(t *testing.T) {
	f := newFixture(t, baseConfig)
	up := upgradetest.NewUpstream(t)
	cfg := strings.Replace(baseConfig, `"*": {max: 50}`, `"*": {max: 1}`, 1) +
		`  - {name: ws, method: GET, path: "/v1/ws/{to}", upstream: patient, websocket: true, policies: [inflight]}
`
	f.useUpstream(t, cfg, up.URL)
	pub, _, _ := f.serve(t)

	ws := upgradetest.Dial(t, pub)
	if resp, _ := ws.Send(get("/v1/ws/101-websocket", upgradetest.WebSocket)); resp == nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %v", resp)
	}
	if !ws.Echo("ping") {
		t.Fatal("the tunnel does not echo")
	}
	if resp, body := upgradetest.Dial(t, pub).Send(get("/v1/ws/x", "")); resp == nil || resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, `"inflight"`) {
		t.Fatalf("while the WebSocket is open: %v %q, want 429 by inflight", resp, body)
	}
	_ = ws.Raw.Close()
	deadline := time.Now().Add(10 * time.Second)
	for f.gw.slots.inflightOf("inflight") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("missed deadline: the closed WebSocket's slot was still held after 10 s")
		}
		time.Sleep(5 * time.Millisecond) // waiting for the gateway to see the closed connection
	}
	if resp, body := upgradetest.Dial(t, pub).Send(get("/v1/ws/x", "")); resp == nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("after the WebSocket closed: %v %q, want 200", resp, body)
	}
}
