package gateway

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/quotagate/quotagate/config"
)

// adminAccess is what guards the protected admin endpoints under one
// configuration.
type adminAccess struct {
	// token is the SHA-256 of the bearer token; nil when none is configured.
	token *[sha256.Size]byte
	// pprof says whether /debug/pprof/ is served.
	pprof bool
	// names are the host names, lowercase, that the admin listener
	// answers for besides IP addresses (see checkAdminHost): "localhost",
	// the host of server.admin_listen when it is a name, and
	// server.admin_hosts.
	names map[string]bool
}

// newAdminAccess reads the admin token named by cfg's
// server.admin_token_env. A variable that is named but unset or empty is a
// configuration error naming that field.
func newAdminAccess(cfg *config.Config, getenv func(string) (string, bool)) (*adminAccess, error) {
	a := &adminAccess{pprof: cfg.Server.Pprof, names: map[string]bool{"localhost": true}}
	if host, _, err := net.SplitHostPort(cfg.Server.AdminListen); err == nil && host != "" {
		if _, err := netip.ParseAddr(host); err != nil {
			a.names[strings.ToLower(host)] = true
		}
	}
	for _, h := range cfg.Server.AdminHosts {
		a.names[h] = true
	}
	name := cfg.Server.AdminTokenEnv
	if name == "" {
		return a, nil
	}
	v, ok := getenv(name)
	switch {
	case !ok:
		return nil, config.Errors{{Path: "server.admin_token_env", Problem: "environment variable " + name + " is not set"}}
	case v == "":
		return nil, config.Errors{{Path: "server.admin_token_env", Problem: "environment variable " + name + " is empty"}}
	}
	sum := sha256.Sum256([]byte(v))
	a.token = &sum
	return a, nil
}

// protectAdmin lets a request through to next only when the live
// configuration allows it:
//
//   - with a token configured: a request carrying "Authorization: Bearer
//     <token>" (compared in constant time); any other is answered 401 with
//     WWW-Authenticate;
//   - without one: every request while the admin listener is bound to a
//     loopback address (only this host can connect), none otherwise (403),
//     so that an admin listener published on 0.0.0.0 never shows the
//     configuration, the hot keys or the profiles to whoever reaches it.
func (g *Gateway) protectAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := g.admin.Load()
		if a.token == nil {
			if !g.adminLoopback.Load() {
				writeProblem(w, problem{Status: http.StatusForbidden, Error: codeForbidden, RequestID: newRequestID(),
					Message: "the admin listener is not bound to a loopback address and no admin token is configured (server.admin_token_env)"})
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		got, ok := bearerToken(r.Header.Get("Authorization"))
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="quotagate-admin"`)
			writeProblem(w, problem{Status: http.StatusUnauthorized, Error: codeUnauthenticated, RequestID: newRequestID(),
				Message: "this admin endpoint requires Authorization: Bearer <admin token>"})
			return
		}
		sum := sha256.Sum256([]byte(got))
		if subtle.ConstantTimeCompare(sum[:], a.token[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="quotagate-admin", error="invalid_token"`)
			writeProblem(w, problem{Status: http.StatusUnauthorized, Error: codeUnauthenticated, RequestID: newRequestID(),
				Message: "the admin token is not valid"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// checkAdminHost lets a request through to next only when its Host is one
// the admin listener is reachable at by a name it can trust:
//
//   - an IP address (v4, or v6 in brackets), whatever it is: kubelet's
//     probes send the pod's IP and port, Prometheus the address of its
//     target, and a page in a browser can only reach an IP-literal Host
//     from an origin of that very IP, so no DNS answer can re-bind it;
//   - "localhost", the host of server.admin_listen when that is a name,
//     or a name in server.admin_hosts, case-insensitively;
//   - no Host at all (HTTP/1.0), which no browser sends.
//
// The port is not compared: a rebinding page is served from the admin
// port itself, so the port would tell it from nothing, and port forwards
// (kubectl port-forward 19090:9090) change it. The machine's hostname is
// not accepted unless listed: its resolution (search domains, the local
// network's DNS) is not the gateway's to vouch for.
//
// Any other Host is answered 421 Misdirected Request: the request came to
// a server that does not answer for that name (RFC 9110, section
// 15.5.20), which is the case, and a 403 here would read like the
// protected endpoints' "no token configured". It applies to every admin
// endpoint, /healthz, /readyz and /metrics included (/readyz names the
// policies that fail closed; one rule is easier to trust than a list of
// exceptions): a probe sent by name fails at once, with a message naming
// server.admin_hosts.
func (g *Gateway) checkAdminHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.admin.Load().answersHost(r.Host) {
			writeProblem(w, problem{Status: http.StatusMisdirectedRequest, Error: codeMisdirected, RequestID: newRequestID(),
				Message: "the admin listener answers only for an IP address, localhost, the host of server.admin_listen and the names in server.admin_hosts; add this request's Host to server.admin_hosts to use it"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// answersHost reports whether checkAdminHost lets a request with Host host
// (as net/http gives it in Request.Host) through.
func (a *adminAccess) answersHost(host string) bool {
	if host == "" {
		return true
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	return a.names[strings.ToLower(host)]
}

// bearerToken returns the credential of an "Authorization: Bearer <token>"
// header (the scheme is case-insensitive).
func bearerToken(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimLeft(tok, " ")
	return tok, tok != ""
}
