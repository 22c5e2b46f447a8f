package identity

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
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
			sendRaw(t, srv, tc.headers)
			if r := receive(t, got); r != tc.want {
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
	for _, headers := range []string{
		"X-Forwarded-For: 198.51.100.7",
		"x-forwarded-for: 198.51.100.7",
		"X-FORWARDED-FOR: 198.51.100.7",
		// A client's own entry in one spelling, the trusted proxy's in
		// another: the two are one header, read from the right, so the
		// client cannot pick its address (and its anonymous quota).
		"x-forwarded-for: 203.0.113.99\r\nX-Forwarded-For: 198.51.100.7",
		"X-Forwarded-For: 203.0.113.99\r\nX-FORWARDED-FOR: 198.51.100.7",
	} {
		sendRaw(t, srv, headers)
		if tenant := receive(t, got); tenant != "ip:198.51.100.7" {
			t.Errorf("%q from a trusted peer: caller %q, want ip:198.51.100.7", headers, tenant)
		}
	}
}

// sendRaw sends a GET with the header lines headers ("\r\n" between
// them), spelled exactly as given, to srv over a new connection, and reads
// the response.
func sendRaw(t *testing.T, srv *httptest.Server, headers string) {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /v1/x HTTP/1.1\r\nHost: gw\r\n" + headers + "\r\nConnection: close\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// receive returns what the handler reported for the request just sent,
// failing t as an overrun if it reported nothing in a generous time (the
// request never reached it), rather than hanging the test.
func receive[T any](t *testing.T, got <-chan T) T {
	t.Helper()
	select {
	case v := <-got:
		return v
	case <-time.After(30 * time.Second):
		proctest.FatalOverrun(t, "the handler reported nothing within 30s")
		panic("unreachable")
	}
}
