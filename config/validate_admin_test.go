package config

import (
	"slices"
	"strings"
	"testing"
)

const adminHostsBase = `
identity: {anonymous: {tier: free}}
tiers: {free: {}}
upstreams: {app: {url: "echo:"}}
routes: [{name: r, method: GET, path: /, upstream: app}]
`

// TestAdminHosts: server.admin_hosts takes host names, lowercased; every
// other entry fails with its field path and why.
func TestAdminHosts(t *testing.T) {
	c, err := Parse([]byte("server:\n  admin_hosts: [Admin.Example.COM, quotagate-admin, localhost]\n"+adminHostsBase), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"admin.example.com", "quotagate-admin", "localhost"}; !slices.Equal(c.Server.AdminHosts, want) {
		t.Errorf("admin_hosts = %q, want %q", c.Server.AdminHosts, want)
	}
	if got := c.Redacted()["server"].(map[string]any)["admin_hosts"]; !slices.Equal(got.([]string), c.Server.AdminHosts) {
		t.Errorf("Redacted admin_hosts = %v", got)
	}

	_, err = Parse([]byte(`
server:
  admin_hosts: ["", 10.0.0.7, "[::1]", "admin.example:9090", "*.example.com", "admin.example.", "a..b", "bad_name", ok.example, OK.example]
`+adminHostsBase), noEnv)
	want := strings.Join([]string{
		`server.admin_hosts[0]: must not be empty`,
		`server.admin_hosts[1]: must be a host name, got the IP address "10.0.0.7": every IP address is answered already (an IP cannot be re-bound by DNS)`,
		`server.admin_hosts[2]: must be a host name, got the IP address "[::1]": every IP address is answered already (an IP cannot be re-bound by DNS)`,
		`server.admin_hosts[3]: must be a host name without port (any port is accepted), got "admin.example:9090"`,
		`server.admin_hosts[4]: must be a host name, got the wildcard "*.example.com": list each name`,
		`server.admin_hosts[5]: must be a host name such as admin.example.com, got "admin.example."`,
		`server.admin_hosts[6]: must be a host name such as admin.example.com, got "a..b"`,
		`server.admin_hosts[7]: must be a host name such as admin.example.com, got "bad_name"`,
		`server.admin_hosts[9]: duplicate of server.admin_hosts[8]`,
	}, "\n")
	if err == nil || err.Error() != want {
		t.Errorf("Parse: %v\nwant:\n%s", err, want)
	}
}

// TestAdminHostsFromTheEnvironment: like every list, admin_hosts can be
// set from the environment, comma-separated.
func TestAdminHostsFromTheEnvironment(t *testing.T) {
	getenv := func(name string) (string, bool) {
		if name == "QUOTAGATE_SERVER_ADMIN_HOSTS" {
			return "Admin.Example.com, metrics.internal", true
		}
		return "", false
	}
	c, err := Parse([]byte(adminHostsBase), getenv)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"admin.example.com", "metrics.internal"}; !slices.Equal(c.Server.AdminHosts, want) {
		t.Errorf("admin_hosts = %q, want %q", c.Server.AdminHosts, want)
	}
}
