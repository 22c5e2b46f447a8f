package config

import (
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/usage"
)

func (b *CostBlock) setDefaults() {
	setZero(&b.MaxBody, 1<<20)
	setZero(&b.OnMissingUsage, MissingUsageKeep)
}

func (m *Measure) setDefaults() {
	setZero(&m.MaxBody, 1<<20)
	setZero(&m.OnMissingUsage, MissingUsageKeep)
}

// decodeKey decodes a route's cost written as a block (a number is decoded
// as any other field): Cost becomes its reserve, and Max defaults to it,
// unless reserve_from reads the body (json): then Max is required (see
// validateCostBlock) and stays 0 when left out.
func (r *Route) decodeKey(d *decoder, path, key string, in any) bool {
	if _, ok := in.(map[string]any); !ok || key != "cost" {
		return false
	}
	b := &CostBlock{}
	b.setDefaults()
	d.decode(path, in, reflect.ValueOf(b).Elem())
	if b.Max == 0 && (b.ReserveFrom == nil || b.ReserveFrom.JSON == "") {
		b.Max = b.Reserve
	}
	r.Cost, r.Settle = b.Reserve, b
	return true
}

// legacyMeasure is the name of the measure a route's cost block is.
const legacyMeasure = "cost"

// measureNameRE is the form of a measure's name.
var measureNameRE = regexp.MustCompile(`^[a-z0-9_]{1,32}$`)

// measure returns the measure a cost block is: the block less its
// settle_policies, which say which policies it settles.
func (b *CostBlock) measure() Measure {
	return Measure{Reserve: b.Reserve, ReserveFrom: b.ReserveFrom, Max: b.Max, SettleFrom: b.SettleFrom,
		MaxBody: b.MaxBody, OnMissingUsage: b.OnMissingUsage}
}

// validateCostBlock checks what a route's cost block has of its own (p is
// the route's path): that measures are not written beside it, and its
// settle_policies, which it lowercases. Its measure is checked by
// validateMeasure.
func (c *Config) validateCostBlock(errs *Errors, p string, r *Route) {
	b := r.Settle
	if b == nil {
		return
	}
	p += ".cost"
	if !r.blockMeasure { // Normalize found measures written beside it
		errs.add(p, "a cost block cannot be written beside measures: write it as measures."+legacyMeasure+
			" and bind each policy to it with {name: P, cost: "+legacyMeasure+"}")
		return
	}
	if b.SettleFrom == nil && len(b.SettlePolicies) > 0 {
		errs.add(p+".settle_policies", "needs settle_from: nothing says what to settle")
	}
	names := r.PolicyNames()
	seen := map[string]bool{}
	for j, name := range b.SettlePolicies {
		pp := index(p+".settle_policies", j)
		pol, known := c.Policies[name]
		switch {
		case !slices.Contains(names, name):
			errs.addf(pp, "%q is not a policy of this route (%s)", name, strings.Join(names, ", "))
		case seen[name]:
			errs.addf(pp, "policy %q is listed twice", name)
		case known && pol.Algorithm == ratelimit.Concurrency:
			errs.addf(pp, "policy %q limits concurrency: a slot is released, not settled", name)
		}
		seen[name] = true
	}
}

// validateMeasure checks measure m of a route at path p (routes[i].cost
// for a cost block, which must state its reserve; routes[i].measures.<name>
// otherwise, where reserve defaults to max when reserve_from is set): its
// bounds, that every policy in bound can hold its max, and its sources.
// Normalize has filled Max (and Reserve) when left out.
func (c *Config) validateMeasure(errs *Errors, p string, m Measure, bound []Policy, block bool) {
	asksJSON := m.ReserveFrom != nil && m.ReserveFrom.JSON != ""
	boundBy := "" // reserve_from.measure
	if m.ReserveFrom != nil {
		boundBy = m.ReserveFrom.Measure
	}
	if m.Reserve < 1 && (block || m.ReserveFrom == nil) {
		errs.add(p+".reserve", "is required, >= 1 (the units taken when the request does not say)")
	}
	switch {
	case m.Max == 0 && asksJSON:
		errs.add(p+".max", "is required with reserve_from.json: a request whose body does not state "+m.ReserveFrom.JSON+
			" readably (compressed, without it, longer than max_body) reserves max")
	case m.Max == 0 && boundBy != "":
		errs.add(p+".max", "is required with reserve_from.measure: it caps the reservation, and is reserved when the body states no bound readably")
	case m.Max < 1:
		if m.Reserve >= 1 || block {
			errs.add(p+".max", "must be >= 1")
		}
	case m.Reserve >= 1 && m.Max < m.Reserve:
		errs.addf(p+".max", "must be >= reserve (%d), got %d", m.Reserve, m.Max)
	case m.Max > m.Reserve || !block && m.ReserveFrom != nil:
		// A request may reserve up to max: every limit bound to it must
		// hold it.
		for _, pol := range bound {
			c.checkCost(errs, p+".max", m.Max, pol)
		}
	case m.Reserve >= 1:
		for _, pol := range bound {
			c.checkCost(errs, p, m.Reserve, pol)
		}
	}
	if m.MaxBody < 1 || m.MaxBody > MaxCostBody {
		errs.addf(p+".max_body", "must be in [1, %d] bytes, got %d", MaxCostBody, m.MaxBody)
	}
	if f := m.ReserveFrom; f != nil {
		switch {
		case f.Measure != "" && (f.JSON != "" || f.Header != ""):
			errs.add(p+".reserve_from.measure", "cannot be written beside json or header: the reservation is settle's value on that measure's bounds")
		case f.Measure != "" && block:
			errs.add(p+".reserve_from.measure", "needs measures: a cost block is its route's only measure; write it as measures."+legacyMeasure)
		case f.Measure == "" && (f.Prompt != "" || f.Completion != ""):
			errs.add(p+".reserve_from", "prompt and completion need measure: they name the fields its bounds stand for")
		case f.JSON == "" && f.Header == "" && f.Measure == "":
			errs.add(p+".reserve_from", "must name json, header or measure (or be left out)")
		}
		sourceErr(errs, p+".reserve_from.json", usage.RequestSource{JSON: f.JSON}.Validate(), "json")
		if len(f.JSONAliases) > 0 && f.JSON == "" {
			errs.add(p+".reserve_from.json_aliases", "needs json: they are more names of the field json names")
		}
		if f.JSONCount != "" && f.JSON == "" {
			errs.add(p+".reserve_from.json_count", "needs json: it multiplies the reservation json states")
		}
		sourceErr(errs, p+".reserve_from.json_count", usage.RequestSource{JSON: f.JSONCount}.Validate(), "json")
		for j, a := range f.JSONAliases {
			if a == "" {
				errs.add(index(p+".reserve_from.json_aliases", j), "must not be empty")
			}
			sourceErr(errs, index(p+".reserve_from.json_aliases", j), usage.RequestSource{JSON: a}.Validate(), "json")
		}
		sourceErr(errs, p+".reserve_from.header", usage.RequestSource{Header: f.Header}.Validate(), "header")
	} else if m.Max > m.Reserve && m.Reserve >= 1 {
		errs.add(p+".max", "is above reserve but no reserve_from says where a request asks for more; remove it or add reserve_from")
	}
	if f := m.ReserveFrom; f != nil {
		switch {
		case f.PromptBytesPerToken < 0:
			errs.addf(p+".reserve_from.prompt_bytes_per_token", "must be >= 1 (or left out), got %d", f.PromptBytesPerToken)
		case f.PromptBytesPerToken > 0 && f.JSON == "":
			errs.add(p+".reserve_from.prompt_bytes_per_token", "needs json: it bounds the prompt of a body that states its completion")
		}
	}
	if m.Settle != "" {
		c.validateSettleExpr(errs, p+".settle", m)
	}
	if f := m.SettleFrom; f != nil {
		if f.Header == "" && f.JSON == "" && f.SSE == "" {
			errs.add(p+".settle_from", "must name header, json or sse (or be left out)")
		}
		sourceErr(errs, p+".settle_from.header", usage.Source{Header: f.Header}.Validate(), "header")
		sourceErr(errs, p+".settle_from.json", usage.Source{JSON: f.JSON}.Validate(), "json")
		sourceErr(errs, p+".settle_from.sse", usage.Source{SSE: f.SSE}.Validate(), "sse")
	}
	switch {
	case m.OnMissingUsage.check() != nil:
		errs.add(p+".on_missing_usage", m.OnMissingUsage.check().Error())
	case m.OnMissingUsage == MissingUsageMax && m.SettleFrom == nil && m.Settle == "":
		errs.add(p+".on_missing_usage", "needs settle_from: without it nothing is settled and the reservation always stands")
	}
}

// priceFields are the fields of a price(...) reference.
var priceFields = []string{"input", "output", "cached"}

// validateSettleExpr checks measure m's settle expression, at path p: its
// syntax, its fields, and that every price it reads is priced for every
// value of its dimension.
func (c *Config) validateSettleExpr(errs *Errors, p string, m Measure) {
	if m.SettleFrom != nil {
		errs.add(p, "settle and settle_from are two ways to say what the response used: write one")
	}
	e := m.expr
	if e == nil { // Normalize could not parse it
		var err error
		if e, err = usage.ParseExpr(m.Settle); err != nil {
			errs.add(p, err.Error())
			return
		}
	}
	if len(e.Fields) > MaxSettleFields {
		errs.addf(p, "reads %d fields, at most %d", len(e.Fields), MaxSettleFields)
	}
	for _, ref := range e.Prices {
		_, ok := c.Dimensions[ref.Dimension]
		switch {
		case !ok:
			errs.addf(p, "price(%s): unknown dimension %q%s", ref.Dimension, ref.Dimension, known(c.Dimensions))
			continue
		case !slices.Contains(priceFields, ref.Field):
			errs.addf(p, "price(%s).%s: a price is input, output or cached", ref.Dimension, ref.Field)
		}
		if _, all := c.Prices["*"]; !all {
			errs.addf(p, "price(%s): prices needs an entry \"*\": it prices the values that are none of dimension %s's, and those without their own",
				ref.Dimension, ref.Dimension)
		}
	}
}

// SettleDimensions returns the dimensions the settle expressions of r's
// measures price by, each once.
func (r *Route) SettleDimensions() []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(r.Measures)) {
		if e := r.Measures[name].expr; e != nil {
			for _, ref := range e.Prices {
				if !slices.Contains(out, ref.Dimension) {
					out = append(out, ref.Dimension)
				}
			}
		}
	}
	return out
}

// validateMeasures checks the measures of route r at path p and the costs
// its policies take (resolved by Normalize): a cost block is the measure
// "cost"; a measure that no policy takes, more than
// MaxMeasures, or more than one measure reading the body is an error.
func (c *Config) validateMeasures(errs *Errors, p string, r *Route) {
	if b := r.Settle; b != nil {
		if r.blockMeasure {
			c.validateMeasure(errs, p+".cost", r.Measures[legacyMeasure], c.boundTo(r, legacyMeasure), true)
		}
		return
	}
	if len(r.Measures) > MaxMeasures {
		errs.addf(p+".measures", "has %d measures, at most %d", len(r.Measures), MaxMeasures)
	}
	reader := ""
	for _, name := range slices.Sorted(maps.Keys(r.Measures)) {
		m, mp := r.Measures[name], p+".measures."+name
		if !measureNameRE.MatchString(name) {
			errs.add(mp, "a measure's name must be 1 to 32 of [a-z0-9_]")
		}
		bound := c.boundTo(r, name)
		if len(bound) == 0 && !slices.ContainsFunc(r.Policies, func(ref PolicyRef) bool { return ref.Measure == name }) {
			errs.addf(mp, "is the cost of no policy of the route: bind one with {name: P, cost: %s}, or remove it", name)
		}
		c.validateMeasure(errs, mp, m, bound, false)
		c.validateReserveBound(errs, mp, name, r, m)
		if m.ReserveFrom != nil && m.ReserveFrom.JSON != "" {
			if reader != "" {
				errs.addf(mp+".reserve_from.json", "only one measure of a route reads the request body, and measure %s does", reader)
			} else {
				reader = name
			}
		}
	}
}

// validateReserveBound checks the reserve_from.measure of measure m,
// named name, of route r (p is its path): that it names another measure
// of r that reads the body with a prompt bound, that m's settle is
// monotone, and its prompt and completion fields (Normalize has filled
// them when left out).
func (c *Config) validateReserveBound(errs *Errors, p, name string, r *Route, m Measure) {
	f := m.ReserveFrom
	if f == nil || f.Measure == "" || f.JSON != "" || f.Header != "" || r.Settle != nil {
		return // none, or reported by validateMeasure
	}
	p += ".reserve_from"
	other, ok := r.Measures[f.Measure]
	switch {
	case f.Measure == name:
		errs.add(p+".measure", "names this measure itself: name the measure whose reserve_from reads the token bounds")
	case !ok:
		errs.addf(p+".measure", "%q is not a measure of this route%s", f.Measure, known(r.Measures))
	case other.ReserveFrom == nil || other.ReserveFrom.JSON == "":
		errs.addf(p+".measure", "measure %s does not read the request body (reserve_from.json): it has no bound of the completion", f.Measure)
	case other.ReserveFrom.PromptBytesPerToken < 1:
		errs.addf(p+".measure", "measure %s has no reserve_from.prompt_bytes_per_token: the prompt has no bound", f.Measure)
	}
	for _, fp := range []struct{ key, path string }{{"prompt", f.Prompt}, {"completion", f.Completion}} {
		sourceErr(errs, p+"."+fp.key, usage.Source{JSON: fp.path}.Validate(), "json")
	}
	if f.Prompt == f.Completion {
		errs.addf(p+".completion", "is the prompt's field too (%s): the two bounds stand for two fields", f.Prompt)
	}
	if m.Settle == "" {
		errs.add(p+".measure", "needs settle: the reservation is settle's value on the bounds")
		return
	}
	e := m.expr
	if e == nil {
		return // reported at settle
	}
	if ok, at := e.Monotone(); !ok {
		errs.addf(p+".measure", "settle subtracts (at %d), so its value on the bounds is no upper bound: write a fixed reserve instead, or a settle without \"-\"", at)
	}
	if !slices.Contains(e.Fields, f.Prompt) && !slices.Contains(e.Fields, f.Completion) {
		errs.addf(p+".measure", "settle reads neither %s nor %s: its value would not grow with the request's bounds", f.Prompt, f.Completion)
	}
}

// boundTo returns the known policies of r whose cost is measure name.
func (c *Config) boundTo(r *Route, name string) []Policy {
	var out []Policy
	for _, ref := range r.Policies {
		if pol, ok := c.Policies[ref.Name]; ok && ref.Measure == name {
			out = append(out, pol)
		}
	}
	return out
}

// PolicyNames returns the names of r's policies, in order.
func (r *Route) PolicyNames() []string {
	out := make([]string, len(r.Policies))
	for i, ref := range r.Policies {
		out[i] = ref.Name
	}
	return out
}

// sourceErr adds err, a usage source's validation error that starts with
// "field: ", at path.
func sourceErr(errs *Errors, path string, err error, field string) {
	if err != nil {
		errs.add(path, strings.TrimPrefix(err.Error(), field+": "))
	}
}
