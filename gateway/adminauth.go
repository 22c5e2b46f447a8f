package gateway

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
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
}

// newAdminAccess reads the admin token named by cfg's
// server.admin_token_env. A variable that is named but unset or empty is a
// configuration error naming that field.
func newAdminAccess(cfg *config.Config, getenv func(string) (string, bool)) (*adminAccess, error) {
	a := &adminAccess{pprof: cfg.Server.Pprof}
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

// isLoopback reports whether addr, a listener's address, accepts only
// connections from this host.
func isLoopback(addr net.Addr) bool {
	switch a := addr.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
