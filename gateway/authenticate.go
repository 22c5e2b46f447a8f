package gateway

import (
	"errors"
	"net/http"

	"github.com/quotagate/quotagate/identity"
)

// authenticate is the identity stage: it resolves the caller or answers 401.
// A bad credential is never downgraded to an anonymous caller.
//
// It also prepares the headers the upstream will see: X-Forwarded-For is
// dropped unless the peer is a trusted proxy (which it records for the
// route stage's override check and for ownHeaders, which drops the other
// client-address headers then), and
// X-Quotagate-Tenant is replaced by the authenticated tenant (absent for
// anonymous callers).
func (g *Gateway) authenticate(p *pipeline) func(http.Handler) http.Handler {
	trusted := p.cfg.Server.TrustedPrefixes
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			st := stateFrom(r.Context())
			caller, err := p.auth.Authenticate(r)
			if err != nil {
				msg := "credential rejected"
				if errors.Is(err, identity.ErrUnauthenticated) {
					msg = identity.Reason(err)
				}
				w.Header().Set("Www-Authenticate", `Bearer realm="quotagate"`)
				writeProblem(w, problem{Status: http.StatusUnauthorized, Error: codeUnauthenticated, Message: msg, RequestID: st.requestID})
				return
			}
			st.caller = caller
			// The names are canonical and the server stores names
			// canonicalised: direct map access is what Del and Set do,
			// without canonicalising the constant names per request.
			st.peerTrusted = identity.PeerTrusted(r.RemoteAddr, trusted)
			if !st.peerTrusted {
				delete(r.Header, "X-Forwarded-For")
			}
			if caller.Kind == identity.KindAnonymous {
				delete(r.Header, "X-Quotagate-Tenant")
			} else {
				st.hdr.tenant[0] = caller.Tenant
				r.Header["X-Quotagate-Tenant"] = st.hdr.tenant[0:1:1]
			}
			next.ServeHTTP(w, r)
		})
	}
}
