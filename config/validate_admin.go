package config

import (
	"net/netip"
	"strings"
)

// checkAdminHosts checks server.admin_hosts: each entry a
// DNS name (no port, no wildcard, no trailing dot), none twice. An IP
// address is refused with the reason: the admin listener answers every
// IP-literal Host already, so listing one would suggest a restriction that
// does not exist.
func checkAdminHosts(errs *Errors, hosts []string) {
	seen := make(map[string]int, len(hosts))
	for i := range hosts {
		p := index("server.admin_hosts", i)
		h := hosts[i]
		switch {
		case h == "":
			errs.add(p, "must not be empty")
		case strings.HasPrefix(h, "[") || isIP(h):
			errs.addf(p, "must be a host name, got the IP address %q: every IP address is answered already (an IP cannot be re-bound by DNS)", h)
		case strings.Contains(h, ":"):
			errs.addf(p, "must be a host name without port (any port is accepted), got %q", h)
		case strings.Contains(h, "*"):
			errs.addf(p, "must be a host name, got the wildcard %q: list each name", h)
		case !hostnameRE.MatchString(h) || strings.Contains(h, ".."):
			errs.addf(p, "must be a host name such as admin.example.com, got %q", h)
		default:
			if j, dup := seen[h]; dup {
				errs.addf(p, "duplicate of %s", index("server.admin_hosts", j))
			}
			seen[h] = i
		}
	}
}

func isIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}
