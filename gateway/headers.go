package gateway

import (
	"net/http"

	"github.com/quotagate/quotagate/identity"
	"github.com/quotagate/quotagate/internal/headername"
)

// ownHeaders, part of upstreamObserver.Outbound, gives the upstream the
// gateway's word on the headers the gateway owns, and nothing of the
// caller's under those names.
//
// The gateway owns X-Request-Id, every X-Quotagate-* header, the
// credentials it consumed (Authorization, X-Api-Key, Proxy-Authorization)
// and the forwarding headers (Forwarded, X-Forwarded-For, -Host, -Proto).
// A header is one of them when its name equals theirs ignoring case and
// reading "_" as "-": CGI, WSGI and Rack upstreams see X_Quotagate_Tenant
// and X-Quotagate-Tenant as the same variable, so a caller could otherwise
// speak in the gateway's name. Every such header is dropped except the
// X-Forwarded-* headers the proxy has just set; then X-Request-Id and, for
// an authenticated caller, X-Quotagate-Tenant are set. It runs after the
// hop-by-hop headers were removed, so a caller naming an owned header in
// Connection cannot remove what the gateway sets. Trailers under owned
// names are dropped too.
//
// Unless the peer is a trusted proxy, the other headers that claim the
// client's address (X-Real-IP, True-Client-IP, ...; see clientIPNames) are
// dropped as well, in headers and trailers: the peer's address reaches the
// upstream in X-Forwarded-For. A trusted proxy's are forwarded as sent.
func ownHeaders(out *http.Request) {
	st := stateFrom(out.Context())
	untrusted := st == nil || !st.peerTrusted
	h := out.Header
	for name := range h {
		if ownedHeader(name) {
			switch name {
			case "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto":
				// Set by the proxy: the trusted chain, the peer, our host and scheme.
			case "X-Request-Id", "X-Quotagate-Tenant":
				// Checked below; kept when they already hold our value.
			default:
				delete(h, name)
			}
		} else if untrusted && clientIPHeader(name) {
			delete(h, name)
		}
	}
	// A chunked body may end in trailers, which some servers merge into the
	// headers: the caller gets no say under an owned name there either.
	for name := range out.Trailer {
		if ownedHeader(name) || untrusted && clientIPHeader(name) {
			delete(out.Trailer, name)
		}
	}
	if st == nil {
		delete(h, "X-Request-Id")
		delete(h, "X-Quotagate-Tenant")
		return
	}
	setOnly(h, "X-Request-Id", st.requestID)
	if st.caller.Kind == identity.KindAnonymous {
		delete(h, "X-Quotagate-Tenant")
	} else {
		setOnly(h, "X-Quotagate-Tenant", st.caller.Tenant)
	}
}

// setOnly makes v the one value of h[name], reusing the slice when it
// already is (the inbound header the earlier stages set, in the common case).
func setOnly(h http.Header, name, v string) {
	if old := h[name]; len(old) != 1 || old[0] != v {
		h[name] = []string{v}
	}
}

// ownedNames are the exact names the gateway owns, lowercase with "-".
var ownedNames = [...]string{
	"x-request-id", "authorization", "x-api-key", "proxy-authorization",
	"forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto",
}

// canonicalOwned reports whether name is one of ownedNames in the spelling
// net/http gives header names it reads: the common case of an owned name,
// decided without comparing byte by byte.
func canonicalOwned(name string) bool {
	switch name {
	case "X-Request-Id", "Authorization", "X-Api-Key", "Proxy-Authorization",
		"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto":
		return true
	}
	return false
}

// ownedInitial reports whether c, ignoring ASCII case, starts one of
// ownedNames or ownedPrefix: a name starting otherwise is not owned.
func ownedInitial(c byte) bool {
	switch c | 0x20 {
	case 'x', 'a', 'p', 'f':
		return true
	}
	return false
}

// ownedPrefix starts every name of the gateway's own headers.
const ownedPrefix = "x-quotagate-"

// ownedHeader reports whether name, ignoring ASCII case and reading "_" as
// "-", is a header the gateway owns. It does not allocate.
func ownedHeader(name string) bool {
	if canonicalOwned(name) {
		return true
	}
	if len(name) == 0 || !ownedInitial(name[0]) {
		return false
	}
	if len(name) >= len(ownedPrefix) && headername.Equal(name[:len(ownedPrefix)], ownedPrefix) {
		return true
	}
	for _, o := range ownedNames {
		if len(name) == len(o) && headername.Equal(name, o) {
			return true
		}
	}
	return false
}
