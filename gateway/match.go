package gateway

import "net/http"

// matchRoute is the route stage: it finds the configured route of the
// request (first match wins) and the stage-2 policies that apply to the
// caller's tier, or answers 404. The raw path never leaves this stage: keys,
// metrics and spans use the route's name.
func (g *Gateway) matchRoute(p *pipeline) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			st := stateFrom(r.Context())
			m, ok := p.table.Match(r.Method, r.URL.EscapedPath())
			if !ok {
				writeProblem(w, problem{Status: http.StatusNotFound, Error: codeNoRoute,
					Message: "no route matches this method and path", RequestID: st.requestID})
				return
			}
			st.route = p.routes[m.Index]
			st.policies = st.route.policyFor(st.caller.Tier)
			next.ServeHTTP(w, r)
		})
	}
}
