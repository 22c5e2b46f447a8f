package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"testing"

	"github.com/quotagate/quotagate/config"
)

// TestUpstreamExchangesSetting: server.upstream_exchanges picks how a
// body-less request reaches the upstream. Only net/http's Transport
// reports getting a connection to the request's trace, so the hook tells
// the two apart.
func TestUpstreamExchangesSetting(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	for _, c := range []struct {
		setting     string
		wantNetHTTP bool
	}{{"direct", false}, {"standard", true}} {
		tr := newTransport(config.Server{UpstreamExchanges: config.Exchanges(c.setting)})
		var gotConn bool
		trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { gotConn = true }}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), "GET", up.URL, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("%s: %v", c.setting, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "ok" || gotConn != c.wantNetHTTP {
			t.Errorf("%s: body %q, through net/http's Transport %v, want %v", c.setting, b, gotConn, c.wantNetHTTP)
		}
		tr.(interface{ CloseIdleConnections() }).CloseIdleConnections()
	}
}
