package routes

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/quotagate/quotagate/internal/headername"
)

// overrideHeaders are request headers that some upstream frameworks route
// by instead of the request line, lowercase with "-": IIS URL Rewrite and
// Symfony (X-Original-URL, X-Rewrite-URL), forward-auth and rewrite setups
// (X-Original-URI, X-Forwarded-URI, X-Forwarded-Path, X-Forwarded-Prefix),
// and method overrides (Google APIs, Express, Symfony and Laravel, OData).
var overrideHeaders = []string{
	"x-original-url", "x-original-uri", "x-rewrite-url", "x-override-url",
	"x-http-method-override", "x-http-method", "x-method-override",
}

// forwardedOverrideHeaders are the override headers a proxy in front sets
// when it rewrites the path (Traefik's StripPrefix sets X-Forwarded-Prefix),
// believed from a trusted proxy as X-Forwarded-For is.
var forwardedOverrideHeaders = []string{"x-forwarded-uri", "x-forwarded-path", "x-forwarded-prefix"}

// Override returns the name of a header or query parameter of a request
// that asks the upstream to route it by another path or method than its
// request line, and false if there is none. Such a request would be
// limited as one route and served as another, so the gateway refuses it.
//
// X-Forwarded-URI, X-Forwarded-Path and X-Forwarded-Prefix are believed
// when trustedProxy says the peer is a trusted proxy, which sets them when
// it rewrites the path; from any other peer they are overrides.
//
// Header names match in any case and with "_" for "-" (CGI, WSGI and Rack
// upstreams see X_Original_URL as X-Original-URL). The query parameter is
// "_method" (Symfony and Laravel honour it on a POST, in the query too), as
// PHP spells it; a "_method" form field in a body is not looked at. Ordinary requests cost a pass over the
// header names and no allocation.
func Override(h http.Header, rawQuery string, trustedProxy bool) (string, bool) {
	for name := range h {
		if len(name) < len("x-http-method") || len(name) > len("x-http-method-override") || (name[0] != 'X' && name[0] != 'x') {
			continue
		}
		for _, o := range overrideHeaders {
			if headername.Equal(name, o) {
				return name, true
			}
		}
		if trustedProxy {
			continue
		}
		for _, o := range forwardedOverrideHeaders {
			if headername.Equal(name, o) {
				return name, true
			}
		}
	}
	for rest := rawQuery; rest != ""; {
		var part string
		part, rest, _ = strings.Cut(rest, "&")
		key, _, _ := strings.Cut(part, "=")
		if isMethodParam(key) {
			return key, true
		}
	}
	return "", false
}

// isMethodParam reports whether the escaped query key names "_method" as
// PHP reads it: decoded, leading spaces dropped, and ".", " " and "[" read
// as "_" (so ".method" and "+_method" are "_method" too).
func isMethodParam(key string) bool {
	if len(key) < len("method") {
		return false
	}
	if strings.ContainsAny(key, "%+") {
		d, err := url.QueryUnescape(key)
		if err != nil {
			return false
		}
		key = d
	}
	key = strings.TrimLeft(key, " ")
	if len(key) != len("_method") {
		return false
	}
	switch key[0] {
	case '_', '.', ' ', '[':
		return strings.EqualFold(key[1:], "method")
	}
	return false
}
