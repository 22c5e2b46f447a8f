package gateway

import (
	"net/http"
	"strings"
	"testing"
)

// clientIPSpoofs are headers claiming a client address, in the spellings
// a caller may send them; CGI, WSGI and Rack read X_Real_IP as X-Real-IP.
var clientIPSpoofs = map[string]string{
	"X-Real-IP": "198.51.100.1", "True-Client-IP": "198.51.100.2", "X-Client-IP": "198.51.100.3",
	"CF-Connecting-IP": "198.51.100.4", "Fastly-Client-IP": "198.51.100.5", "Client-IP": "198.51.100.6",
	"X-Cluster-Client-IP": "198.51.100.7", "X_Real_Ip": "198.51.100.8", "true_client_ip": "198.51.100.9",
}

// TestClientIPHeadersFromUntrustedPeers sends, over a real connection from
// a peer outside server.trusted_proxies, every header through which a
// proxy or CDN names the client, on both forwarding paths (a body-less GET
// and a chunked POST whose trailer repeats one). The upstream receives
// none of them, under any spelling: the address the gateway saw arrives in
// X-Forwarded-For alone. From a trusted proxy they arrive as sent.
func TestClientIPHeadersFromUntrustedPeers(t *testing.T) {
	var spoofs strings.Builder
	for name, v := range clientIPSpoofs {
		spoofs.WriteString(name + ": " + v + "\r\n")
	}
	requests := map[string]string{
		"GET (direct)": "GET /v1/open HTTP/1.1\r\nHost: gw\r\nX-API-Key: " + enterpriseKey + "\r\nX-Forwarded-For: 203.0.113.9\r\n" +
			"X-Custom: kept\r\n" + spoofs.String() + "\r\n",
		"POST (reverse proxy)": "POST /v1/transfers/1 HTTP/1.1\r\nHost: gw\r\nX-API-Key: " + enterpriseKey + "\r\nX-Forwarded-For: 203.0.113.9\r\n" +
			"X-Custom: kept\r\n" + spoofs.String() + "Transfer-Encoding: chunked\r\nTrailer: X-Real-IP\r\n\r\n" +
			"5\r\nhello\r\n0\r\nX-Real-IP: 198.51.100.10\r\n\r\n",
	}
	for _, trusted := range []bool{false, true} {
		cfg := baseConfig
		if trusted {
			cfg = strings.Replace(baseConfig, "trusted_proxies: [10.0.0.0/8]", "trusted_proxies: [127.0.0.0/8]", 1)
		}
		f := newFixture(t, cfg)
		pub, _, _ := f.serve(t)
		for what, req := range requests {
			resp, body := rawGet(t, pub, req)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("trusted %v, %s: %d %s", trusted, what, resp.StatusCode, body)
			}
			up, _ := f.upstream.Last()
			if got := up.Header.Get("X-Custom"); got != "kept" {
				t.Errorf("trusted %v, %s: X-Custom = %q, want kept", trusted, what, got)
			}
			wantXFF := "127.0.0.1"
			if trusted {
				wantXFF = "203.0.113.9, 127.0.0.1"
			}
			if got := up.Header.Values("X-Forwarded-For"); len(got) != 1 || got[0] != wantXFF {
				t.Errorf("trusted %v, %s: X-Forwarded-For = %q, want %q", trusted, what, got, wantXFF)
			}
			received := map[string]string{}
			for name, values := range up.Header {
				if clientIPHeader(name) {
					received[strings.ToLower(strings.ReplaceAll(name, "_", "-"))+" as "+name] = strings.Join(values, ",")
				}
			}
			for name := range up.Trailer {
				if clientIPHeader(name) {
					received["trailer "+name] = up.Trailer.Get(name)
				}
			}
			if !trusted {
				if len(received) != 0 {
					t.Errorf("%s from an untrusted peer: the upstream received %v", what, received)
				}
				continue
			}
			for name, v := range clientIPSpoofs {
				if got := up.Header.Values(name); len(got) != 1 || got[0] != v {
					t.Errorf("%s from a trusted proxy: %s = %q, want %q as sent", what, name, got, v)
				}
			}
		}
	}
}

func TestClientIPHeaderNames(t *testing.T) {
	for name, want := range map[string]bool{
		"X-Real-Ip": true, "x_real_ip": true, "TRUE-CLIENT-IP": true, "X-Client-Ip": true, "Client-Ip": true,
		"Cf-Connecting-Ip": true, "cf_connecting_ipv6": true, "Fastly-Client-Ip": true, "X-Cluster-Client-Ip": true,
		"X-Original-Forwarded-For": true, "X-Forwarded": true, "Forwarded-For": true, "X-Envoy-External-Address": true,
		"X-Real-Ips": false, "X-Real": false, "X-Forwarded-For": false, "Forwarded": false, "Accept": false,
		"Cf-Ray": false, "Client": false, "": false,
	} {
		if got := clientIPHeader(name); got != want {
			t.Errorf("clientIPHeader(%q) = %v, want %v", name, got, want)
		}
	}
	for _, n := range clientIPNames {
		if !clientIPHeader(n) || !clientIPHeader(strings.ToUpper(n)) {
			t.Errorf("clientIPHeader(%q) = false: the shortcuts refuse a name of the list", n)
		}
		if ownedHeader(n) {
			t.Errorf("%s is owned too: it would be dropped from trusted proxies", n)
		}
	}
}
