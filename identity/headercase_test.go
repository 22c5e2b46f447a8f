package identity

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

// TestCredentialHeaderNameCase sends the credential headers over a real
// connection under names in any case: header names are case-insensitive, and
// Authenticate reads them as the server stored them. Each case must be
// authenticated as its key's tenant, and a conflicting pair in mixed case
// must still be seen as two headers.
func TestCredentialHeaderNameCase(t *testing.T) {
	a := mustNew(t, testConfig())
	type result struct {
		tenant, reason string
	}
	got := make(chan result, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := a.Authenticate(r)
		got <- result{c.Tenant, Reason(err)}
	}))
	defer srv.Close()

	for _, tc := range []struct {
		headers string
		want    result
	}{
		{"authorization: Bearer " + acmeKey, result{tenant: "acme"}},
		{"AUTHORIZATION: Bearer " + acmeKey, result{tenant: "acme"}},
		{"aUtHoRiZaTiOn: bearer " + globexKey, result{tenant: "globex"}},
		{"x-api-key: " + globexKey, result{tenant: "globex"}},
		{"X-API-KEY: " + globexKey, result{tenant: "globex"}},
		{"X-Api-Key: " + acmeKey, result{tenant: "acme"}},
		{"x-api-key: " + acmeKey + "\r\nX-API-KEY: " + acmeKey, result{reason: "multiple credential headers"}},
		{"authorization: Bearer " + acmeKey + "\r\nX-Api-key: " + globexKey, result{reason: "conflicting credentials"}},
	} {
		t.Run(strings.ReplaceAll(tc.headers, "\r\n", " | "), func(t *testing.T) {
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Write([]byte("GET /v1/x HTTP/1.1\r\nHost: gw\r\n" + tc.headers + "\r\nConnection: close\r\n\r\n")); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if r := <-got; r != tc.want {
				t.Fatalf("Authenticate gave %+v, want %+v", r, tc.want)
			}
		})
	}
}

// TestForwardedForHeaderNameCase sends X-Forwarded-For from a trusted peer
// over a real connection under names in any case: each is believed, so
// the anonymous caller is known by the address it names.
func TestForwardedForHeaderNameCase(t *testing.T) {
	c := testConfig()
	c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	a := mustNew(t, c)
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		caller, err := a.Authenticate(r)
		if err != nil {
			got <- err.Error()
			return
		}
		got <- caller.Tenant
	}))
	defer srv.Close()
	for _, name := range []string{"X-Forwarded-For", "x-forwarded-for", "X-FORWARDED-FOR"} {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write([]byte("GET /v1/x HTTP/1.1\r\nHost: gw\r\n" + name + ": 198.51.100.7\r\nConnection: close\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		conn.Close()
		if tenant := <-got; tenant != "ip:198.51.100.7" {
			t.Errorf("%s from a trusted peer: caller %q, want ip:198.51.100.7", name, tenant)
		}
	}
}
