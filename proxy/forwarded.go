package proxy

import (
	"net"
	"net/http"
	"strings"
)

// setXForwarded sets the X-Forwarded-* headers of out from the inbound
// request in, as httputil.ProxyRequest.SetXForwarded does when the inbound
// chain has been carried over: X-Forwarded-For is in's X-Forwarded-For
// values joined by ", ", followed by the peer's IP (or removed when
// in.RemoteAddr is not host:port); X-Forwarded-Host is in.Host;
// X-Forwarded-Proto is "https" when in arrived over TLS, else "http".
//
// The three values are stored in one array, each header's slice of
// capacity one (a later Add copies rather than overwriting a neighbour):
// one allocation where SetXForwarded makes three, plus the joined string
// when in carries a chain.
func setXForwarded(out http.Header, in *http.Request) {
	setXForwardedIn(out, in, new([3]string))
}

// setXForwardedIn is setXForwarded with the values stored in vals, which
// the three headers then share.
func setXForwardedIn(out http.Header, in *http.Request, vals *[3]string) {
	proto := "http"
	if in.TLS != nil {
		proto = "https"
	}
	*vals = [3]string{1: in.Host, 2: proto}
	if clientIP, _, err := net.SplitHostPort(in.RemoteAddr); err == nil {
		if prior := in.Header["X-Forwarded-For"]; len(prior) > 0 {
			clientIP = strings.Join(prior, ", ") + ", " + clientIP
		}
		vals[0] = clientIP
		out["X-Forwarded-For"] = vals[0:1:1]
	} else {
		delete(out, "X-Forwarded-For")
	}
	out["X-Forwarded-Host"] = vals[1:2:2]
	out["X-Forwarded-Proto"] = vals[2:3:3]
}
