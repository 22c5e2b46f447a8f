package gateway

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/internal/headername"
	"github.com/quotagate/quotagate/usage"
)

// costStage sets the request's reservation of each measure of its route
// and its stage 1 cost (see reservation), refuses a HEAD on a route
// settled from the response body, and asks the upstream for an identity
// body when a usage is read from it.
func (g *Gateway) costStage() func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			st := stateFrom(r.Context())
			ms := st.route.measures
			if readsBody(ms) {
				// A compressed body is not read for usage, so a caller asking
				// for one would keep its (possibly tiny) reservation whatever
				// it used: the upstream is asked for an identity body. In
				// every spelling: Accept_Encoding is the same variable to
				// CGI, WSGI and Rack upstreams.
				for name := range r.Header {
					if headername.Equal(name, "accept-encoding") {
						delete(r.Header, name)
					}
				}
			}
			if r.Method == http.MethodHead && bodyUsage(ms) {
				// A HEAD runs the upstream's GET but returns no body, so a
				// usage read from the body never arrives: the caller would
				// pay the reservation for the GET's work. Refused, not
				// forwarded.
				w.Header().Set("Allow", "GET")
				writeProblem(w, problem{Status: http.StatusMethodNotAllowed, Error: codeMethodNotAllowed,
					Message:   "route " + st.route.name + " settles its cost from the response body, which a HEAD does not return; use GET",
					RequestID: st.requestID})
				return
			}
			res := reservation(r, st, g.bodyBudget)
			if res.overBudget {
				g.opts.Metrics.BodyOverBudget(r.Context())
			}
			if res.refusal != nil {
				writeRouteProblem(w, st, *res.refusal)
				return
			}
			st.cost, st.value = res.units, res.value
			if st.route.dim.name != "" {
				st.policies = st.route.policyFor(st.caller.Tier, res.value)
			}
			next.ServeHTTP(w, r)
		})
	}
}

// reserved is what a request reserves on its route: the units of stage 1,
// the units of each measure (also in st.reserved), why (for explain), or
// the refusal to answer instead.
type reserved struct {
	units int64
	// why says where units came from: "cost" (a fixed cost), "stated"
	// (the request stated it), "reserve" (nothing to read: the block's
	// reserve), "max" (a body the gateway could not read a reservation
	// from), "over_budget" (max: the body buffer budget was spent);
	// for a measure, also "bound" (its expression on the token bounds,
	// see measure.boundReservation).
	why string
	// measures and whys are the same per measure of the route.
	measures [config.MaxMeasures]int64
	whys     [config.MaxMeasures]string
	// value is the index of the request's value of the route's dimension,
	// or usage.Other (see config.Dimension).
	value int
	// prompt and completion are the bounds of the request's tokens that
	// the measure reading the body found, when bounds (it has a prompt
	// bound and the body stated the completion): ceil(body bytes /
	// prompt_bytes_per_token), and the stated completion times its count.
	prompt, completion uint64
	bounds             bool
	overBudget         bool
	refusal            *problem
}

// reservation returns what r reserves on st's route: each measure's units
// (see measureReservation; a measure with reserve_from.measure, once the
// others are read, boundReservation), recorded in st.reserved, and stage 1's: its
// cost block's reservation, or the route's fixed cost. The first measure
// that refuses the request refuses it. The gateway and explain both
// decide here.
func reservation(r *http.Request, st *requestState, budget *usage.Budget) reserved {
	out := reserved{value: usage.Other}
	label := st.route.dim.label
	labeled := false // label read with a measure's reservation
	for i, m := range st.route.measures {
		var l usage.Label
		if m.asks && m.reserveFrom.JSON != "" && label.JSON != "" {
			l, labeled = label, true // the same pass of the same body prefix
		}
		one := measureReservation(r, st, m, l, budget)
		if one.refusal != nil {
			return one
		}
		out.measures[i], out.whys[i] = one.units, one.why
		out.overBudget = out.overBudget || one.overBudget
		if one.bounds {
			out.prompt, out.completion, out.bounds = one.prompt, one.completion, true
		}
		if l.JSON != "" {
			out.value = one.value
		}
	}
	if !labeled && (label.JSON != "" || label.Header != "") {
		one := measureReservation(r, st, &labelOnly, label, budget)
		if one.refusal != nil {
			return one
		}
		out.value, out.overBudget = one.value, out.overBudget || one.overBudget
	}
	for i, m := range st.route.measures { // on the bounds and the value read above
		if m.bound >= 0 {
			out.measures[i], out.whys[i] = m.boundReservation(&out)
		}
	}
	st.reserved = out.measures
	out.units, out.why = st.route.cost, "cost"
	if l := st.route.localMeasure; l >= 0 {
		out.units, out.why = out.measures[l], out.whys[l]
	}
	return out
}

// measureReservation returns the units r reserves of measure m: what the
// request asks for in reserve_from when it says; else, when reserve_from
// reads the body (json), max, since the upstream acts on a body the
// gateway could not read the reservation from (content-coded, of another
// type than JSON, without the field, longer than max_body, past the body
// buffer budget, or no body at all); else reserve. A request that asks
// for more than max, or whose stated reservation is not one whole number
// of units (a header stated twice is not), is refused 400; one whose body
// cannot be read, as its body fault says (400, 408, 413). The bytes
// buffered are added to st.bodyHeld, to be given back to budget (nil:
// none) when the request ends; at most one measure of a route reads the
// body (config.Route.Measures).
func measureReservation(r *http.Request, st *requestState, m *measure, label usage.Label, budget *usage.Budget) reserved {
	if !m.asks {
		return reserved{units: m.reserve, why: "reserve", value: usage.Other}
	}
	units, found, value, held, err := usage.FromRequestLabeled(r, m.reserveFrom, label, m.maxBody, budget)
	st.bodyHeld += held
	refuse := func(p problem) reserved {
		p.RequestID = st.requestID
		return reserved{refusal: &p}
	}
	switch {
	case errors.Is(err, usage.ErrOverBudget):
		// The gateway holds as many bodies as it may: this one is
		// forwarded as it streams, and reserves as one that states
		// nothing (see docs/security.md#hostile-input).
		return reserved{units: m.max, why: "over_budget", overBudget: true, value: usage.Other}
	case err != nil && st.bodyFault.load() != bodyOK:
		pr, _ := st.bodyFault.load().problem(st.requestID, 0)
		return reserved{refusal: &pr}
	case errors.Is(err, usage.ErrMalformed):
		return refuse(problem{Status: http.StatusBadRequest, Error: codeBadRequest,
			Message: "the reservation the request states is not one whole number of units: " + err.Error()})
	case err != nil:
		return refuse(problem{Status: http.StatusBadRequest, Error: codeBadRequest, Message: "the request body could not be read"})
	case found && units > uint64(m.max):
		return refuse(problem{Status: http.StatusBadRequest, Error: codeBadRequest,
			Message: "the request asks to reserve " + strconv.FormatUint(units, 10) + " units" + measureOf(st, m) + "; route " + st.route.name +
				" reserves at most " + strconv.FormatInt(m.max, 10)})
	case found && m.perToken > 0 && r.ContentLength < 0:
		return reserved{units: m.max, why: "max", value: value} // a prompt of unknown size
	case found:
		// A reservation of 0 would ask without taking.
		out := reserved{units: max(int64(units), 1), why: "stated", value: value}
		if m.perToken > 0 { // the prompt's bound: ceil(body bytes / bytes per token), within max
			prompt := (r.ContentLength + m.perToken - 1) / m.perToken
			out.prompt, out.completion, out.bounds = uint64(prompt), units, true
			out.units = min(out.units+prompt, m.max)
		}
		return out
	case m.reserveFrom.JSON != "":
		return reserved{units: m.max, why: "max", value: value} // the caller cannot shrink what its body asks for by hiding it
	}
	return reserved{units: m.reserve, why: "reserve", value: value}
}

// labelOnly reads a route's dimension when no measure reads the body
// with it: it reserves nothing of its own, and reads the body's first
// MiB, the default max_body.
var labelOnly = measure{name: "dimension", asks: true, maxBody: 1 << 20}

// measureOf names measure m in a refusal: " of tokens"; nothing for a
// route's cost block, the route's one measure.
func measureOf(st *requestState, m *measure) string {
	if st.route.localMeasure >= 0 && st.route.measures[st.route.localMeasure] == m {
		return ""
	}
	return " of " + m.name
}
