package e2e

import (
	"encoding/json"
	"net/http"
	"testing"
)

// TestHostileRouteSpellings runs the real binary with a strict route
// (GET /v1/transfers/{id} and GET /v1/transfers, sharing one request per
// hour) and, declared after them, a catch-all without limits, then spends
// the strict policy's only unit. Every
// spelling of /v1/transfers/1 that some upstream reads as that route must
// then be answered 429 by the strict policy (it is charged there) or 404
// (it matches nothing); none may reach the upstream through the catch-all.
// Nor may a header or query parameter that names another path or method.
func TestHostileRouteSpellings(t *testing.T) {
	up := startUpstream(t)
	cfg := limiterConfig(up.URL(), nil, "acme")
	cfg.Policies["strict"] = policyCfg{Limits: map[string]limitCfg{"std": bucket(1, "1h", 1)}}
	cfg.route("transfers.get", "GET", "/v1/transfers/{id}", 1, "strict")
	cfg.route("transfers.list", "GET", "/v1/transfers", 1, "strict")
	cfg.route("rest", "GET", "/{rest...}", 1)
	gw := startGateway(t, "gw", cfg)
	auth := "X-API-Key: key-acme\r\n"

	if r := rawStatus(t, gw.Addr, get("/v1/transfers/1", auth)); r.status != http.StatusOK {
		t.Fatalf("first request to the strict route: %d %s, want 200", r.status, r.body)
	}
	charged := []string{
		"/v1/transfers/1",
		"/v1/transfers;x=1/1",          // path parameter
		"/v1;jsessionid=a/transfers/1", // path parameter
		"/v1/transfers%3Bx/1",          // encoded path parameter
		"/V1/Transfers/1",              // case
		"/v1/%54RANSFERS/1",            // case, percent-encoded
		"/v1/%EF%BD%94ransfers/1",      // full-width t
		"/v1/%F0%9D%90%ADransfers/1",   // mathematical bold t
		"/v1/tran%C5%BFfers/1",         // long s
		"/v1/trans%C2%ADfers/1",        // soft hyphen
		"/v1/transfers%E2%80%8B/1",     // zero-width space
		"/v1/tra%CC%81nsfers/1",        // combining accent
		"/v1/transfers%20/1",           // trailing space
		"/v1/%20transfers/1",           // leading space
		"/v1/transfers%C2%A0/1",        // no-break space
		"/v1/transfers./1",             // trailing dot
		"/v1/transfers.%20./1",         // trailing dots and spaces
		"/V1/%EF%BD%94RANSFERS%20;a/1", // several at once
		"/v1/transfers.json",           // format suffix (Rails, Spring): transfers.list
		"/v1/Transfers.tar.gz;x",       // format suffix, case, parameter
		"/index.php/v1/transfers/1",    // PHP front controller (Laravel, Symfony)
		"/Index%2Ephp/v1/transfers.json",
	}
	for _, p := range charged {
		r := rawStatus(t, gw.Addr, get(p, auth))
		var body struct{ Policy string }
		_ = json.Unmarshal([]byte(r.body), &body)
		if r.status != http.StatusTooManyRequests || body.Policy != "strict" {
			t.Errorf("%s: %d %s, want 429 by policy strict (charged to a strict route)", p, r.status, truncate(r.body, 120))
		}
	}
	refused := []string{
		"/v1/%2574ransfers/1",          // double encoding
		"/v1/%252574ransfers/1",        // triple encoding
		"/v1/%25u0074ransfers/1",       // IIS %u after one decoding
		"/v1/%u0074ransfers/1",         // IIS %u
		"/v1/%EF%BC%8574ransfers/1",    // full-width percent
		"/v1/%C0%AE%C0%AE/transfers/1", // overlong dots
		"/v1/transfers%C0%AF1",         // overlong slash
		"/v1/transfers%00/1",           // NUL
		"/v1/transfers%09/1",           // tab
		"/v1/transfers%C2%85/1",        // C1 control
		"/v1/x/..;/transfers/1",        // dot-dot with a parameter
		"/v1/x/%E2%80%A5/transfers/1",  // two dot leader
		"/v1%EF%BC%8Ftransfers/1",      // full-width slash
		"/v1%5Ctransfers/1",            // encoded backslash
		"/v1/;x/transfers/1",           // empty once the parameter is dropped
	}
	for _, p := range refused {
		r := rawStatus(t, gw.Addr, get(p, auth))
		if r.status != http.StatusNotFound && r.status != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 404 (or 400 from the HTTP server)", p, r.status, truncate(r.body, 120))
		}
	}
	// Headers and parameters that make some upstreams route by another path
	// or method than the request line are refused.
	for _, c := range []struct{ path, header string }{
		{"/v1/other/1", "X-Original-URL: /v1/transfers/1\r\n"},
		{"/v1/other/1", "X_Original_URL: /v1/transfers/1\r\n"},
		{"/v1/other/1", "x-rewrite-url: /v1/transfers/1\r\n"},
		{"/v1/other/1", "X-Forwarded-Prefix: /v1/transfers\r\n"},
		{"/v1/other/1", "X-HTTP-Method-Override: DELETE\r\n"},
		{"/v1/other/1?_method=DELETE", ""},
		{"/v1/other/1?%5Fmethod=DELETE", ""},
	} {
		if r := rawStatus(t, gw.Addr, get(c.path, auth+c.header)); r.status != http.StatusBadRequest {
			t.Errorf("%s with %q: %d %s, want 400", c.path, c.header, r.status, truncate(r.body, 120))
		}
	}
	// The catch-all still serves what is not the strict route.
	for _, p := range []string{"/v1/other/1", "/v1/%D1%82ransfers/1", "/v1/trans%20fers/1"} {
		if r := rawStatus(t, gw.Addr, get(p, auth)); r.status != http.StatusOK {
			t.Errorf("%s: %d, want 200 from the catch-all", p, r.status)
		}
	}
	for _, req := range up.requests() {
		switch req.Path {
		case "/v1/transfers/1", "/v1/other/1", "/v1/тransfers/1", "/v1/trans fers/1":
		default:
			t.Errorf("the upstream received %q", truncate(req.Path, 80))
		}
	}
	if n := len(up.requests()); n != 4 {
		t.Errorf("the upstream received %d requests, want 4 (one to the strict route, three to the catch-all)", n)
	}
	healthy(t, gw, "key-acme")
}
