package e2e

import (
	"net/http"
	"strings"
	"testing"
)

// TestHostileOwnedHeaders: the upstream receives X-Quotagate-*, X-Request-Id,
// the credentials and the forwarding headers only as the gateway set them.
// Spellings that CGI, WSGI and Rack upstreams read as the same variable
// (X_Quotagate_Tenant, x_request_id, ...) are dropped, and naming an owned
// header in Connection does not remove what the gateway sets.
func TestHostileOwnedHeaders(t *testing.T) {
	gw, up := startHostile(t)
	spoofs := "X_Quotagate_Tenant: evil\r\nx_quotagate_tenant: evil\r\nX_Quotagate_Role: admin\r\nX-Quotagate-Role: admin\r\n" +
		"X_Request_Id: evil-id\r\nX_Api_Key: stolen\r\nX_Forwarded_For: 203.0.113.66\r\nForwarded: for=203.0.113.66\r\n"
	cases := []struct{ path, headers, requestID string }{
		{"/ok/underscored", spoofs, ""},
		{"/ok/connection", "X-Request-Id: caller-id-1\r\nConnection: X-Quotagate-Tenant, X-Request-Id, X-Forwarded-For\r\n", "caller-id-1"},
		{"/ok/both", "X-Request-Id: caller-id-2\r\nConnection: x-quotagate-tenant, x-request-id\r\n" + spoofs, "caller-id-2"},
	}
	for _, c := range cases {
		r := rawStatus(t, gw.Addr, get(c.path, "X-API-Key: key-acme\r\n"+c.headers))
		if r.status != http.StatusOK {
			t.Fatalf("%s: %d %q", c.path, r.status, r.body)
		}
		seen := waitSeen(t, up, c.path)
		wantID := c.requestID
		if wantID == "" {
			wantID = r.header.Get("X-Request-Id")
		}
		want := map[string]string{"x-quotagate-tenant": "acme", "x-request-id": wantID,
			"x-forwarded-for": "127.0.0.1", "x-forwarded-host": "gw", "x-forwarded-proto": "http"}
		got := map[string][]string{}
		for name, values := range seen.Header {
			norm := strings.ToLower(strings.ReplaceAll(name, "_", "-"))
			if strings.HasPrefix(norm, "x-quotagate-") || strings.HasPrefix(norm, "x-forwarded-") ||
				strings.Contains(" x-request-id authorization x-api-key forwarded ", " "+norm+" ") {
				got[norm] = append(got[norm], values...)
			}
		}
		for norm, values := range got {
			if len(values) != 1 || values[0] != want[norm] {
				t.Errorf("%s: the upstream received %s = %q, want %q", c.path, norm, values, want[norm])
			}
		}
		for norm, v := range want {
			if _, ok := got[norm]; !ok {
				t.Errorf("%s: the upstream received no %s, want %q", c.path, norm, v)
			}
		}
	}
	healthy(t, gw, "key-acme")
}
