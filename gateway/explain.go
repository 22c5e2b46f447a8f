package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/identity"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/routes"
	"github.com/quotagate/quotagate/usage"
)

// Explanation is what the pipeline would apply to one request, without
// sending it anywhere or consuming anything.
type Explanation struct {
	Route    string `json:"route"`
	Template string `json:"template"`
	Caller   string `json:"caller"` // tenant, or the hashed client address of an anonymous caller
	Kind     string `json:"kind"`
	Tier     string `json:"tier"`
	Cost     int64  `json:"cost"`
	// Reserve is what this request would reserve (its method, headers and
	// body as given), decided as the gateway decides it; ReserveWhy says
	// why: cost (a fixed cost), stated (the request says), reserve (the
	// block's reserve: nothing to read), max (a body it could not read a
	// reservation from, or none where reserve_from reads the body), bound
	// (a measure's settle on the request's token bounds, see
	// config.ReserveFrom.Measure).
	Reserve    int64  `json:"reserve"`
	ReserveWhy string `json:"reserve_why"`
	// Refusal, when not empty, is the answer the request would get before
	// any limit (a 400 for a reservation above max, ...).
	Refusal string `json:"refusal,omitempty"`
	// Settle is the route's cost block: Cost is then its reserve.
	Settle *SettleExplained `json:"settle,omitempty"`
	// Dimension is the request's value of the route's dimension, such as
	// "model=gpt-4o" ("model=*": none of its values); empty without one.
	Dimension string `json:"dimension,omitempty"`
	// Measures are the route's measures (a cost block is the measure
	// "cost"), ordered by name, with what this request reserves of each.
	Measures []MeasureExplained `json:"measures,omitempty"`
	Local    *config.Limit      `json:"local,omitempty"`
	// Policies are the stage-2 policies the request is decided against;
	// for a route that lists upstreams, none: see Upstreams.
	Policies []PolicyExplained `json:"policies"`
	// Upstreams are, for a route that lists upstreams, each of them in
	// the order a request is decided against them (the next when the
	// policies of one deny), with its policies; empty otherwise.
	Upstreams []CandidateExplained `json:"upstreams,omitempty"`
}

// CandidateExplained is one upstream of a route that lists upstreams:
// the policies a request forwarded there takes, each with its cost, and
// what it reserves there; a request decided against it and denied takes
// nothing from it.
type CandidateExplained struct {
	Upstream string            `json:"upstream"`
	Policies []PolicyExplained `json:"policies"`
	// Reserve is, by measure name, the units of the measure that the
	// upstream's policies take (each of them that names it takes them);
	// a measure none of them takes is absent.
	Reserve map[string]int64 `json:"reserve,omitempty"`
	// Slots is the concurrency slots the request holds there while it
	// runs.
	Slots int `json:"slots,omitempty"`
}

// SettleExplained is how a route's cost is reserved and settled.
type SettleExplained struct {
	// Max is the largest reservation a request may state (ReserveFrom).
	Max         int64  `json:"max"`
	ReserveFrom string `json:"reserve_from,omitempty"` // "json max_tokens, header X-Max-Tokens"
	SettleFrom  string `json:"settle_from,omitempty"`  // "" when nothing is settled
	// Policies are the settled policies.
	Policies []string `json:"policies,omitempty"`
}

// MeasureExplained is one measure of a route and what the request
// reserves of it.
type MeasureExplained struct {
	Name string `json:"name"`
	// Reserve and ReserveWhy are as Explanation's, for this measure.
	Reserve     int64  `json:"reserve"`
	ReserveWhy  string `json:"reserve_why"`
	Max         int64  `json:"max"`
	ReserveFrom string `json:"reserve_from,omitempty"`
	SettleFrom  string `json:"settle_from,omitempty"` // "" when nothing is settled
}

// PolicyExplained is one stage-2 policy as it applies to the request.
type PolicyExplained struct {
	Name string `json:"name"`
	// Cost is the units the request takes from the policy (1 for a
	// concurrency policy: a slot); Measure the measure it is, "" for a
	// fixed cost; Settled whether the measure's usage settles it.
	Cost         int64         `json:"cost"`
	Measure      string        `json:"measure,omitempty"`
	Settled      bool          `json:"settled,omitempty"`
	Scope        string        `json:"scope"`
	Algorithm    string        `json:"algorithm"`
	OnStoreError string        `json:"on_store_error"`
	Shadow       bool          `json:"shadow"`
	Rate         int64         `json:"rate"`
	Per          time.Duration `json:"per"`
	Burst        int64         `json:"burst,omitempty"`
	// Max is a concurrency policy's most requests in flight (Per is then
	// its slot_ttl and Rate 0); 0 otherwise.
	Max int64 `json:"max,omitempty"`
	// Calendar is "month in Europe/Berlin" for a calendar window (Per is
	// then 0), empty otherwise.
	Calendar string `json:"calendar,omitempty"`
	Key      string `json:"key"`
}

// ExplainRequest is the request Explain looks at.
type ExplainRequest struct {
	Method, Path string
	// Credential is an API key or a JWT; "" is an anonymous caller from
	// 127.0.0.1.
	Credential string
	// Header holds more request headers (Content-Type, a reserve_from
	// header, ...); nil for none.
	Header http.Header
	// Body is the request body; nil for none.
	Body []byte
}

// Explain tells which route, caller, tier, policies and store keys req
// would get under cfg, and what it would reserve. Keys carry the hashed
// tenant, never the raw path or tenant.
func Explain(cfg *config.Config, req ExplainRequest, getenv func(string) (string, bool)) (*Explanation, error) {
	o := &Options{Getenv: getenv}
	o.fill()
	p, err := buildPipeline(cfg, nil, nil, o, nil)
	if err != nil {
		return nil, err
	}
	method := req.Method
	r, err := explainRequest(method, req.Path)
	if err != nil {
		return nil, err
	}
	r.RemoteAddr = "127.0.0.1:1"
	for k, vs := range req.Header {
		for _, v := range vs {
			r.Header.Add(k, v)
		}
	}
	if req.Credential != "" {
		r.Header.Set("Authorization", "Bearer "+req.Credential)
	}
	if req.Body != nil {
		r.Body = io.NopCloser(bytes.NewReader(req.Body))
		r.ContentLength = int64(len(req.Body))
		if len(req.Body) == 0 {
			r.Body = http.NoBody
		}
	}
	m, ok := p.table.Match(method, r.URL.EscapedPath())
	if !ok {
		return nil, fmt.Errorf("no route matches %s %s", method, r.URL.EscapedPath())
	}
	caller, err := p.auth.Authenticate(r)
	if err != nil {
		return nil, err
	}
	rt, routeIndex := p.routes[m.Index], m.Index
	ex := &Explanation{Route: rt.name, Template: m.Template, Kind: caller.Kind.String(), Tier: caller.Tier, Cost: rt.cost}
	st := &requestState{route: rt}
	res := reserved{value: usage.Other}
	if r.ContentLength > p.body.max {
		ex.Refusal = "413 payload_too_large: the body exceeds server.max_body_bytes"
	} else {
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = newRequestBody(nil, r, st, p.body)
		}
		res = reservation(r, st, nil)
		ex.Reserve, ex.ReserveWhy = res.units, res.why
		if res.refusal != nil {
			ex.Refusal = strconv.Itoa(res.refusal.Status) + " " + res.refusal.Error + ": " + res.refusal.Message
		}
	}
	for i, m := range rt.measures {
		me := MeasureExplained{Name: m.name, Reserve: st.reserved[i], ReserveWhy: res.whys[i], Max: m.max,
			ReserveFrom: sources("json", strings.Join(append([]string{m.reserveFrom.JSON}, m.reserveFrom.JSONAliases...), " or "), "header", m.reserveFrom.Header)}
		if m.bound >= 0 {
			me.ReserveFrom = "the token bounds of " + rt.measures[m.bound].name
		}
		if m.settles {
			if m.expr != nil {
				me.SettleFrom = "settle " + cfg.Routes[routeIndex].Measures[m.name].Settle
			} else {
				f := m.fields[0]
				me.SettleFrom = sources("header", f.Header, "json", f.JSON, "sse", f.SSE)
			}
		}
		ex.Measures = append(ex.Measures, me)
	}
	if l := rt.localMeasure; l >= 0 { // a cost block
		me := ex.Measures[l]
		ex.Settle = &SettleExplained{Max: me.Max, ReserveFrom: me.ReserveFrom, SettleFrom: me.SettleFrom}
		if me.SettleFrom != "" {
			for _, ref := range cfg.Routes[m.Index].Policies { // a concurrency policy holds a slot, never units
				if ref.Measure == me.Name && !ref.Unsettled && cfg.Policies[ref.Name].Algorithm != ratelimit.Concurrency {
					ex.Settle.Policies = append(ex.Settle.Policies, ref.Name)
				}
			}
		}
	}
	if rt.dim.name != "" {
		i := res.value
		if i < 0 {
			i = len(rt.dim.label.Values)
		}
		ex.Dimension = rt.dim.name + "=" + rt.dimensionValue(i)
	}
	ex.Caller = caller.Tenant
	if caller.Kind == identity.KindAnonymous {
		ex.Caller = "ip#" + caller.ID
	}
	if t, ok := cfg.Tiers[caller.Tier]; ok && t.Local != nil {
		l := *t.Local
		ex.Local = &l
	}
	subject := p.subjectID(caller.Subject)
	if rt.upstreamName == "" {
		ex.Policies, err = explainPolicies(rt, rt.policyFor(caller.Tier, res.value), subject, &st.reserved)
		return ex, err
	}
	for c := rt; c != nil; c = c.fallback { // as globalStage tries them
		ps := c.policyFor(caller.Tier, res.value)
		ce := CandidateExplained{Upstream: c.upstreamName}
		if ce.Policies, err = explainPolicies(c, ps, subject, &st.reserved); err != nil {
			return nil, err
		}
		for i := range ps {
			switch bp := &ps[i]; {
			case bp.algorithm == ratelimit.Concurrency:
				ce.Slots++
			case bp.measure >= 0:
				if ce.Reserve == nil {
					ce.Reserve = map[string]int64{}
				}
				ce.Reserve[c.measures[bp.measure].name] = st.reserved[bp.measure]
			}
		}
		ex.Upstreams = append(ex.Upstreams, ce)
	}
	return ex, nil
}

// explainPolicies explains policies ps of route rt for a caller whose
// subject id is subject and a request that reserved reserved of each
// measure.
func explainPolicies(rt *route, ps []boundPolicy, subject routes.SubjectID, reserved *[config.MaxMeasures]int64) ([]PolicyExplained, error) {
	var out []PolicyExplained
	for i := range ps {
		bp := &ps[i]
		key, err := bp.pattern.Key(subject)
		if err != nil {
			return nil, err
		}
		pe := PolicyExplained{
			Name: bp.name, Cost: bp.cost(reserved), Settled: bp.measure >= 0 && bp.settles && rt.measures[bp.measure].settles, Scope: bp.scope.String(), Algorithm: bp.algorithm.String(), OnStoreError: bp.onError.String(),
			Shadow: bp.shadow, Rate: bp.limit.Rate, Per: bp.limit.Per, Burst: bp.limit.Burst, Max: bp.limit.Max, Calendar: bp.limit.Calendar.String(), Key: key,
		}
		if bp.measure >= 0 {
			pe.Measure = rt.measures[bp.measure].name
		}
		out = append(out, pe)
	}
	return out, nil
}

// explainRequest builds the request Explain looks at. A method that is not
// an HTTP token, or a path that is not an origin-form request target ("/"
// then path and query, as a server would read it from a request line), is
// an error; so is whitespace, which cannot be in a request line.
func explainRequest(method, path string) (*http.Request, error) {
	if method == "" {
		return nil, errors.New("method: empty")
	}
	r, err := http.NewRequest(method, "http://quotagate.invalid/", nil)
	if err != nil { // not an RFC 9110 token
		return nil, fmt.Errorf("method %q: not an HTTP method token", method)
	}
	if !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("path %q: must start with /", path)
	}
	if strings.ContainsAny(path, " \t") {
		return nil, fmt.Errorf("path %q: contains whitespace (percent-encode it: %%20)", path)
	}
	u, err := url.ParseRequestURI(path)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("path %q: %w", path, err)
	}
	r.URL = u
	r.RequestURI = path
	return r, nil
}

// sources lists the named sources that are set, as "name value, ...", in
// the order given (pairs of name and value).
func sources(kv ...string) string {
	var out []string
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			out = append(out, kv[i]+" "+kv[i+1])
		}
	}
	return strings.Join(out, ", ")
}
