package identity

import (
	"net/http"
	"net/netip"
	"strings"
)

// ClientIP returns the address of the client that sent r.
//
// It is the peer address of r.RemoteAddr unless that peer is in trusted.
// Only then is X-Forwarded-For believed: its entries (of every such header,
// in order) are walked from the right, each trusted hop is skipped, and the
// first untrusted address is the client. A malformed entry stops the walk and
// the last good hop is returned; if every hop is trusted, the leftmost one
// is. An entry may carry a port ("192.0.2.1:4711", "[2001:db8::1]:4711").
// IPv4-mapped IPv6 addresses are unmapped and zones dropped. The zero Addr is
// returned when r.RemoteAddr cannot be parsed.
func ClientIP(r *http.Request, trusted []netip.Prefix) netip.Addr {
	peer := parseHop(r.RemoteAddr)
	if !peer.IsValid() || !isTrusted(peer, trusted) {
		return peer
	}
	vals := r.Header["X-Forwarded-For"] // canonical, as net/http stores names: no canonicalising per request
	for i := len(vals) - 1; i >= 0; i-- {
		v := vals[i]
		for {
			comma := strings.LastIndexByte(v, ',')
			hop := parseHop(strings.Trim(v[comma+1:], " \t"))
			if !hop.IsValid() {
				return peer
			}
			peer = hop
			if !isTrusted(hop, trusted) {
				return hop
			}
			if comma < 0 {
				break
			}
			v = v[:comma]
		}
	}
	return peer
}

// parseHop parses an address with or without a port; the zero Addr if s is
// neither. The form is chosen from the text ("[" or a single ":" means a
// port follows), so that a well-formed RemoteAddr, which always carries a
// port, is parsed once and without allocating a parse error.
func parseHop(s string) netip.Addr {
	var a netip.Addr
	if strings.HasPrefix(s, "[") || strings.Count(s, ":") == 1 {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return netip.Addr{}
		}
		a = ap.Addr()
	} else {
		var err error
		if a, err = netip.ParseAddr(s); err != nil {
			return netip.Addr{}
		}
	}
	return a.Unmap().WithZone("")
}

// PeerTrusted reports whether the peer address remoteAddr (an
// http.Request's RemoteAddr, with or without a port) is in trusted, read
// as ClientIP reads it: unmapped, without its zone. An address that cannot
// be parsed is not trusted.
func PeerTrusted(remoteAddr string, trusted []netip.Prefix) bool {
	if len(trusted) == 0 {
		return false
	}
	peer := parseHop(remoteAddr)
	return peer.IsValid() && isTrusted(peer, trusted)
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// anonymousTenant returns the tenant of an anonymous caller at a: "ip:" and
// the address, or for IPv6 its prefix of v6bits bits (32 to 128). Holders
// of an IPv6 address usually control a whole /64 at least, often a /56 or
// a /48 (a tunnel broker hands out a /48 for free), and could otherwise
// rotate through as many identities as the prefix has addresses.
func anonymousTenant(a netip.Addr, v6bits int) string {
	var buf [64]byte // "ip:" and the longest IPv6 prefix fit
	b := append(buf[:0], anonymousNS...)
	switch {
	case !a.IsValid():
		return anonymousNS + "unknown"
	case a.Is4():
		return string(a.AppendTo(b))
	}
	p, err := a.Prefix(v6bits)
	if err != nil {
		return anonymousNS + "unknown"
	}
	return string(p.AppendTo(b))
}
