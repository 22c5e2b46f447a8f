package proxy

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"reflect"
	"testing"
)

// setXForwarded must set exactly what httputil's SetXForwarded sets on a
// request whose inbound chain was carried over, in every case.
func TestSetXForwardedMatchesHTTPUtil(t *testing.T) {
	cases := []struct {
		name   string
		remote string
		xff    []string
		tls    bool
	}{
		{"plain", "192.0.2.1:1234", nil, false},
		{"chain", "192.0.2.1:1234", []string{"203.0.113.9"}, false},
		{"two chain headers", "192.0.2.1:1234", []string{"203.0.113.9, 10.0.0.1", "10.0.0.2"}, true},
		{"ipv6 peer", "[2001:db8::1]:443", nil, true},
		{"no port", "192.0.2.1", []string{"203.0.113.9"}, false},
		{"empty remote", "", nil, false},
	}
	for _, c := range cases {
		in := httptest.NewRequest("GET", "http://front.example/x", nil)
		in.RemoteAddr = c.remote
		if c.xff != nil {
			in.Header["X-Forwarded-For"] = c.xff
		}
		if c.tls {
			in.TLS = &tls.ConnectionState{}
		}
		// What ReverseProxy hands Rewrite: a clone without X-Forwarded-*.
		strip := func() *http.Request {
			out := in.Clone(in.Context())
			for _, h := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
				out.Header.Del(h)
			}
			out.Header.Set("X-Other", "kept")
			return out
		}
		want := &httputil.ProxyRequest{In: in, Out: strip()}
		if xff, ok := in.Header["X-Forwarded-For"]; ok {
			want.Out.Header["X-Forwarded-For"] = xff
		}
		want.SetXForwarded()
		got := strip()
		setXForwarded(got.Header, in)
		if !reflect.DeepEqual(got.Header, want.Out.Header) {
			t.Errorf("%s: headers\n got %q\nwant %q", c.name, got.Header, want.Out.Header)
		}
	}
}

func TestSetXForwardedAllocs(t *testing.T) {
	in := httptest.NewRequest("GET", "http://front.example/x", nil)
	in.RemoteAddr = "192.0.2.1:1234"
	out := http.Header{}
	setXForwarded(out, in)
	if n := testing.AllocsPerRun(100, func() { setXForwarded(out, in) }); n > 1 {
		t.Errorf("%v allocations per call, want at most 1", n)
	}
}
