package config

import (
	"reflect"
	"slices"
	"strings"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/usage"
)

func (b *CostBlock) setDefaults() {
	setZero(&b.MaxBody, 1<<20)
	setZero(&b.OnMissingUsage, MissingUsageKeep)
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

// validateCostBlock checks a route's cost block (p is the route's path):
// its bounds, that every limit of the route can hold its max, its sources,
// and that settle_policies are policies of the route that hold units. It
// lowercases settle_policies.
func (c *Config) validateCostBlock(errs *Errors, p string, r *Route) {
	b := r.Settle
	if b == nil {
		return
	}
	p += ".cost"
	if b.Reserve < 1 {
		errs.add(p+".reserve", "is required, >= 1 (the units taken when the request does not say)")
	}
	switch {
	case b.Max == 0 && b.ReserveFrom != nil && b.ReserveFrom.JSON != "":
		errs.add(p+".max", "is required with reserve_from.json: a request whose body does not state "+b.ReserveFrom.JSON+
			" readably (compressed, without it, longer than max_body) reserves max")
	case b.Max < 1:
		errs.add(p+".max", "must be >= 1")
	case b.Reserve >= 1 && b.Max < b.Reserve:
		errs.addf(p+".max", "must be >= reserve (%d), got %d", b.Reserve, b.Max)
	case b.Max > b.Reserve:
		// A request may reserve up to max: every limit must hold it.
		for _, name := range r.Policies {
			if pol, ok := c.Policies[strings.ToLower(name)]; ok {
				c.checkCost(errs, p+".max", b.Max, pol)
			}
		}
		c.checkLocalCost(errs, p+".max", b.Max)
	}
	if b.MaxBody < 1 || b.MaxBody > MaxCostBody {
		errs.addf(p+".max_body", "must be in [1, %d] bytes, got %d", MaxCostBody, b.MaxBody)
	}
	if f := b.ReserveFrom; f != nil {
		if f.JSON == "" && f.Header == "" {
			errs.add(p+".reserve_from", "must name json or header (or be left out)")
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
	} else if b.Max > b.Reserve {
		errs.add(p+".max", "is above reserve but no reserve_from says where a request asks for more; remove it or add reserve_from")
	}
	if f := b.SettleFrom; f != nil {
		if f.Header == "" && f.JSON == "" && f.SSE == "" {
			errs.add(p+".settle_from", "must name header, json or sse (or be left out)")
		}
		sourceErr(errs, p+".settle_from.header", usage.Source{Header: f.Header}.Validate(), "header")
		sourceErr(errs, p+".settle_from.json", usage.Source{JSON: f.JSON}.Validate(), "json")
		sourceErr(errs, p+".settle_from.sse", usage.Source{SSE: f.SSE}.Validate(), "sse")
	} else if len(b.SettlePolicies) > 0 {
		errs.add(p+".settle_policies", "needs settle_from: nothing says what to settle")
	}
	switch {
	case b.OnMissingUsage.check() != nil:
		errs.add(p+".on_missing_usage", b.OnMissingUsage.check().Error())
	case b.OnMissingUsage == MissingUsageMax && b.SettleFrom == nil:
		errs.add(p+".on_missing_usage", "needs settle_from: without it nothing is settled and the reservation always stands")
	}
	seen := map[string]bool{}
	for j, name := range b.SettlePolicies {
		pp := index(p+".settle_policies", j)
		name = strings.ToLower(name)
		b.SettlePolicies[j] = name
		pol, known := c.Policies[name]
		switch {
		case !slices.Contains(r.Policies, name):
			errs.addf(pp, "%q is not a policy of this route (%s)", name, strings.Join(r.Policies, ", "))
		case seen[name]:
			errs.addf(pp, "policy %q is listed twice", name)
		case known && pol.Algorithm == ratelimit.Concurrency:
			errs.addf(pp, "policy %q limits concurrency: a slot is released, not settled", name)
		}
		seen[name] = true
	}
}

// sourceErr adds err, a usage source's validation error that starts with
// "field: ", at path.
func sourceErr(errs *Errors, path string, err error, field string) {
	if err != nil {
		errs.add(path, strings.TrimPrefix(err.Error(), field+": "))
	}
}
