package gateway

import (
	"fmt"
	"net/http"

	"github.com/quotagate/quotagate/routes"
	"github.com/quotagate/quotagate/usage"
)

// matchRoute is the route stage: it finds the configured route of the
// request (first match wins) and the stage-2 policies that apply to the
// caller's tier, or answers 404. A request carrying a header or query
// parameter that asks upstreams to route by another path or method
// (routes.Override) is answered 400. The raw path never leaves this stage: keys,
// metrics and spans use the route's name.
func (g *Gateway) matchRoute(p *pipeline) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			st := stateFrom(r.Context())
			if name, ok := routes.Override(r.Header, r.URL.RawQuery, st.peerTrusted); ok {
				writeProblem(w, problem{Status: http.StatusBadRequest, Error: codeBadRequest,
					Message:   fmt.Sprintf("%.40q asks the upstream for another path or method than the request line; send them in the request line", name),
					RequestID: st.requestID})
				return
			}
			m, ok := p.table.Match(r.Method, r.URL.EscapedPath())
			if !ok {
				writeProblem(w, problem{Status: http.StatusNotFound, Error: codeNoRoute,
					Message: "no route matches this method and path", RequestID: st.requestID})
				return
			}
			st.route = p.routes[m.Index]
			st.policies = st.route.policyFor(st.caller.Tier, usage.Other) // the cost stage reads the dimension, if any
			next.ServeHTTP(w, r)
		})
	}
}
