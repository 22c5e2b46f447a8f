package gateway

import "github.com/quotagate/quotagate/internal/headername"

// clientIPNames are the headers, besides X-Forwarded-For and Forwarded,
// through which proxies and CDNs tell an upstream the client's address,
// lowercase with "-". An upstream that believes one of them (for its own
// limits, logs, geolocation or allow-lists) believes whoever set it, so
// from a peer outside server.trusted_proxies they are not forwarded: the
// address the gateway saw reaches the upstream in X-Forwarded-For only.
var clientIPNames = [...]string{
	"x-real-ip", "true-client-ip", "x-client-ip", "client-ip",
	"cf-connecting-ip", "cf-connecting-ipv6", "fastly-client-ip",
	"x-cluster-client-ip", "x-original-forwarded-for", "x-forwarded",
	"forwarded-for", "x-envoy-external-address",
}

// clientIPHeader reports whether name, ignoring ASCII case and reading "_"
// as "-", is one of clientIPNames. It does not allocate.
func clientIPHeader(name string) bool {
	// The first and last letters of clientIPNames turn most other names
	// away (Accept, Content-Type, Cookie, User-Agent) before any comparison.
	if len(name) == 0 {
		return false
	}
	switch name[0] | 0x20 {
	case 'x', 't', 'c', 'f':
	default:
		return false
	}
	switch name[len(name)-1] | 0x20 {
	case 'p', '6', 'r', 'd', 's':
	default:
		return false
	}
	for _, n := range clientIPNames {
		if headername.Equal(name, n) {
			return true
		}
	}
	return false
}
