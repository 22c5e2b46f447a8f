package proxy

import (
	"net/http"
	"net/textproto"
	"strings"
)

// The header rules of forwarding (see forward.go), written once: which
// headers never pass the proxy (RFC 9110, 7.6.1: the hop-by-hop ones and
// every name Connection lists; the forwarding headers the proxy sets
// itself; the credentials the gateway consumes), each removed in one
// pass over a message's headers rather than one Header.Del per name.

// outboundHeader returns the headers of in without the hop-by-hop ones
// (those of hopOrOwned and every name listed in Connection) and without
// the ones the outbound request gets from the proxy or must not carry
// (see hopOrOwned). The values are in's, capped to their length, so that
// an Add copies.
func outboundHeader(in http.Header) http.Header {
	conn := in["Connection"]
	out := make(http.Header, len(in)+4)
	for k, vv := range in {
		if hopOrOwned(k) || conn != nil && listedIn(conn, k) {
			continue
		}
		out[k] = vv[:len(vv):len(vv)]
	}
	return out
}

// hopOrOwned reports whether the header named k (canonical) never passes
// the proxy to the upstream: a hop-by-hop header, a forwarding header
// the proxy sets itself, a credential the gateway consumes, or
// HTTP2-Settings (connection-specific, RFC 9113, 3.2.1; see
// upgradeAllowed).
func hopOrOwned(k string) bool {
	switch k {
	case "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto",
		"Authorization", "X-Api-Key", "Http2-Settings":
		return true
	}
	return isHopHeader(k)
}

// isHopHeader reports whether k (canonical) is a hop-by-hop header,
// removed from every message the proxy forwards.
func isHopHeader(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// removeHopHeaders deletes from h the hop-by-hop headers and every
// header named in its Connection, in one pass.
func removeHopHeaders(h http.Header) {
	conn := h["Connection"]
	for k := range h {
		if isHopHeader(k) || conn != nil && listedIn(conn, k) {
			delete(h, k)
		}
	}
}

// listedIn reports whether one of the comma-separated names in the
// Connection values conn deletes the header named k, as Header.Del of
// that name would: k is the name's canonical form.
func listedIn(conn []string, k string) bool {
	for _, v := range conn {
		for len(v) > 0 {
			name := v
			if i := strings.IndexByte(v, ','); i >= 0 {
				name, v = v[:i], v[i+1:]
			} else {
				v = ""
			}
			name = textproto.TrimString(name)
			// Canonicalizing changes only the case of ASCII letters, so
			// the cheap test rules out all but a name that matches.
			if name != "" && len(name) == len(k) && asciiEqualFold(name, k) &&
				textproto.CanonicalMIMEHeaderKey(name) == k {
				return true
			}
		}
	}
	return false
}

// asciiEqualFold reports whether a and b, of the same length, are equal
// ignoring the case of ASCII letters.
func asciiEqualFold(a, b string) bool {
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if x == y {
			continue
		}
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// copyHeader adds the values of src to dst, as Header.Add of each would.
// A name dst does not hold yet takes src's values, capped to their length
// so that a later Add copies.
func copyHeader(dst, src http.Header) {
	for k, vv := range src {
		if len(vv) == 0 {
			continue
		}
		k = textproto.CanonicalMIMEHeaderKey(k)
		if prev, ok := dst[k]; ok {
			dst[k] = append(prev, vv...)
		} else {
			dst[k] = vv[:len(vv):len(vv)]
		}
	}
}
