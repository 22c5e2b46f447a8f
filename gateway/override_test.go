package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestRouteOverridesAreRefused: headers and query parameters that make some
// upstreams serve another path or method than the request line names are
// answered 400 and never forwarded, whatever their case or separators;
// X-Forwarded-Prefix is believed from a trusted proxy.
func TestRouteOverridesAreRefused(t *testing.T) {
	f := newFixture(t, baseConfig)
	for _, c := range []struct {
		target string
		header map[string]string
	}{
		{"/v1/open", map[string]string{"X-Original-URL": "/v1/transfers/1"}},
		{"/v1/open", map[string]string{"X_Rewrite_URL": "/v1/transfers/1"}},
		{"/v1/open", map[string]string{"x-forwarded-prefix": "/v1/transfers"}},
		{"/v1/transfers/1", map[string]string{"X-HTTP-Method-Override": "POST"}},
		{"/v1/transfers/1", map[string]string{"X-Http-Method": "POST"}},
		{"/v1/transfers/1?_method=POST", nil},
		{"/v1/transfers/1?x=1&.method=POST", nil},
	} {
		hdr := map[string]string{"Authorization": "Bearer " + freeKey}
		for k, v := range c.header {
			hdr[k] = v
		}
		w := f.do("GET", c.target, hdr, nil)
		m := problemBody(t, w, http.StatusBadRequest, "bad_request")
		if msg, _ := m["message"].(string); !strings.Contains(msg, "request line") {
			t.Errorf("%s %v: message %q", c.target, c.header, msg)
		}
	}
	if up, _ := f.upstream.Last(); up != nil {
		t.Fatalf("the upstream received %s %s", up.Method, up.URL)
	}
	if w := f.do("GET", "/v1/transfers/1?method=x&page=2", bearer(freeKey), nil); w.Code != http.StatusOK {
		t.Fatalf("an ordinary request: %d %s", w.Code, w.Body.String())
	}
	// A trusted proxy that rewrote the path says so in X-Forwarded-Prefix.
	r := httptest.NewRequest("GET", "/v1/transfers/2", nil)
	r.RemoteAddr = "10.0.0.7:4000"
	r.Header.Set("Authorization", "Bearer "+freeKey)
	r.Header.Set("X-Forwarded-Prefix", "/api")
	w := httptest.NewRecorder()
	f.gw.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Fatalf("X-Forwarded-Prefix from a trusted proxy: %d %s, want 200", w.Code, w.Body.String())
	}
}
