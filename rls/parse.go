package rls

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/ratelimit"
)

// The keys each level of a descriptor file may hold: envoyproxy/ratelimit's
// own, and quotagate's extensions under rate_limit (algorithm, burst,
// on_store_error).
var (
	rootKeys       = []string{"domain", "descriptors"}
	descriptorKeys = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode",
		"detailed_metric", "value_to_metric", "share_threshold", "metadata"}
	rateLimitKeys = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces",
		"algorithm", "burst", "on_store_error"}
	replacesKeys = []string{"name"}
)

// ParseError is one problem of a descriptor file.
type ParseError struct {
	File string
	// Line is the 1-based line of the offending node; 0 when unknown.
	Line int
	// Path locates the key, such as "descriptors[0].rate_limit.unit".
	Path    string
	Problem string
}

// Error returns "file:line: path: problem".
func (e *ParseError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	if e.Path != "" {
		b.WriteString(": " + e.Path)
	}
	b.WriteString(": " + e.Problem)
	return b.String()
}

// LoadFiles reads every descriptor file and returns their domains. Every
// problem of every file is reported, joined (errors.Join of *ParseError),
// naming the file, line and key. Two files of one domain are an error, as in
// envoyproxy/ratelimit by default.
func LoadFiles(paths []string) (*Rules, error) {
	rs := &Rules{domains: make(map[string]*Domain, len(paths))}
	var errs []error
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, fmt.Errorf("rls config file: %w", err))
			continue
		}
		d, err := ParseFile(path, data)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if prev, dup := rs.domains[d.Name]; dup {
			errs = append(errs, &ParseError{File: path, Path: "domain",
				Problem: fmt.Sprintf("domain %q is already defined in %s", d.Name, prev.File)})
			continue
		}
		rs.domains[d.Name] = d
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return rs, nil
}

// ParseFile parses one descriptor file in envoyproxy/ratelimit's format:
//
//	domain: <name>            # required, not empty
//	descriptors:
//	  - key: <key>            # required, not empty
//	    value: <value>        # optional; may contain '*' wildcards
//	    rate_limit:           # optional
//	      unit: second|minute|hour|day|week|month|year (any case)
//	      requests_per_unit: <0..2^32-1>   # 0 means every hit is over
//	      unlimited: false    # true: no unit; always OK
//	      name: <name>        # optional, for replaces
//	      replaces: [{name: <name>}]
//	      algorithm: fixed_window   # extension; default fixed_window
//	      burst: <n>          # extension, token_bucket only; default requests_per_unit
//	      on_store_error: unavailable|open|closed|local  # extension
//	    shadow_mode: false
//	    quota_mode: false
//	    detailed_metric: false  # accepted; metrics keep configured names
//	    value_to_metric: false  # accepted; metrics keep configured names
//	    share_threshold: false  # with a wildcard value: one counter for all matches
//	    metadata: {...}       # accepted and ignored
//	    descriptors: [...]    # nested, same shape
//
// Decoding is strict: an unknown key, a value of the wrong type, a duplicate
// sibling (same key and value) and a limit the store cannot apply exactly are
// errors naming the file, line and key path. name is used in errors only.
func ParseFile(name string, data []byte) (*Domain, error) {
	p := &parser{file: name}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &ParseError{File: name, Problem: "malformed YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, &ParseError{File: name, Problem: "is empty: want a domain and its descriptors"}
	}
	d := &Domain{File: name}
	root := doc.Content[0]
	fields := p.mapping(root, "", rootKeys)
	if v := fields["domain"]; v == nil {
		p.add(root, "domain", "is required")
	} else if d.Name = p.str(v, "domain"); d.Name == "" && len(p.errs) == 0 {
		p.add(v, "domain", "must not be empty")
	}
	if v := fields["descriptors"]; v != nil {
		p.descriptors(v, "descriptors", d.Name, &d.root)
	}
	if len(p.errs) > 0 {
		slices.SortStableFunc(p.errs, func(a, b error) int {
			return a.(*ParseError).Line - b.(*ParseError).Line
		})
		return nil, errors.Join(p.errs...)
	}
	return d, nil
}

type parser struct {
	file string
	errs []error
}

func (p *parser) add(n *yaml.Node, path, problem string) {
	p.errs = append(p.errs, &ParseError{File: p.file, Line: n.Line, Path: path, Problem: problem})
}

// mapping returns n's values by key, reporting keys outside allowed,
// duplicate keys and a node that is not a mapping.
func (p *parser) mapping(n *yaml.Node, path string, allowed []string) map[string]*yaml.Node {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.add(n, orRoot(path), "must be a mapping, got "+kindName(n))
		return nil
	}
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		kp := join(path, k.Value)
		switch {
		case k.Kind != yaml.ScalarNode || k.Tag != "!!str":
			p.add(k, kp, "key must be a string")
		case !slices.Contains(allowed, k.Value):
			p.add(k, kp, "unknown key (allowed here: "+strings.Join(allowed, ", ")+")")
		case out[k.Value] != nil:
			p.add(k, kp, "written twice")
		default:
			out[k.Value] = v
		}
	}
	return out
}

func orRoot(path string) string {
	if path == "" {
		return "(document)"
	}
	return path
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.AliasNode:
		return "an alias"
	}
	return strconv.Quote(n.Value)
}

func (p *parser) str(n *yaml.Node, path string) string {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.add(n, path, "must be a string, got "+kindName(n))
		return ""
	}
	return n.Value
}

func (p *parser) boolean(n *yaml.Node, path string) bool {
	var b bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&b) != nil {
		p.add(n, path, "must be true or false, got "+kindName(n))
	}
	return b
}

func (p *parser) uint32(n *yaml.Node, path string) (uint32, bool) {
	v, err := strconv.ParseUint(n.Value, 10, 32)
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || err != nil {
		p.add(n, path, fmt.Sprintf("must be a whole number from 0 to %d, got %s", uint32(math.MaxUint32), kindName(n)))
		return 0, false
	}
	return uint32(v), true
}

// descriptors parses a list of sibling descriptors into parent.
func (p *parser) descriptors(n *yaml.Node, path, parentPath string, parent *node) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	if n.Kind != yaml.SequenceNode {
		p.add(n, path, "must be a list of descriptors, got "+kindName(n))
		return
	}
	for i, dn := range n.Content {
		p.descriptor(dn, path+"["+strconv.Itoa(i)+"]", parentPath, parent)
	}
}

func (p *parser) descriptor(n *yaml.Node, path, parentPath string, parent *node) {
	f := p.mapping(n, path, descriptorKeys)
	if f == nil {
		if n.Kind != yaml.MappingNode {
			return
		}
		f = map[string]*yaml.Node{}
	}
	before := len(p.errs)
	var key, value string
	if v := f["key"]; v == nil {
		p.add(n, path+".key", "is required")
	} else if key = p.str(v, path+".key"); key == "" && len(p.errs) == before {
		p.add(v, path+".key", "must not be empty")
	}
	if v := f["value"]; v != nil {
		value = p.str(v, path+".value")
	}
	flag := func(name string) bool {
		if v := f[name]; v != nil {
			return p.boolean(v, path+"."+name)
		}
		return false
	}
	shadow, quota, detailed := flag("shadow_mode"), flag("quota_mode"), flag("detailed_metric")
	flag("value_to_metric")
	share := flag("share_threshold")
	if share && !strings.Contains(value, "*") {
		p.add(f["share_threshold"], path+".share_threshold", "applies only to a value with a '*' wildcard")
	}
	rulePath := parentPath + "." + key
	if value != "" {
		rulePath += "_" + value
	}
	child := &node{}
	if v := f["rate_limit"]; v != nil {
		child.rule = p.rateLimit(v, path+".rate_limit", rulePath)
		if child.rule != nil {
			child.rule.Shadow, child.rule.Quota, child.rule.DetailedMetric = shadow, quota, detailed
		}
	}
	if v := f["descriptors"]; v != nil {
		p.descriptors(v, path+".descriptors", rulePath, child)
	}
	if len(p.errs) > before || key == "" {
		return
	}
	if strings.Contains(value, "*") {
		for _, w := range parent.wild {
			if w.key == key && w.pattern == value {
				p.add(n, path, fmt.Sprintf("duplicate descriptor %s=%s", key, value))
				return
			}
		}
		parent.wild = append(parent.wild, wildNode{key: key, parts: strings.Split(value, "*"), shared: share, pattern: value, n: child})
		return
	}
	e := Entry{Key: key, Value: value}
	if parent.exact[e] != nil {
		p.add(n, path, fmt.Sprintf("duplicate descriptor %s=%s", key, value))
		return
	}
	if parent.exact == nil {
		parent.exact = make(map[Entry]*node)
	}
	parent.exact[e] = child
}

// rateLimit parses a rate_limit mapping into a rule, or nil after an error.
func (p *parser) rateLimit(n *yaml.Node, path, rulePath string) *Rule {
	f := p.mapping(n, path, rateLimitKeys)
	if f == nil {
		if n.Kind == yaml.MappingNode || n.Tag == "!!null" {
			p.add(n, path, "must set unit and requests_per_unit, or unlimited: true")
		}
		return nil
	}
	before := len(p.errs)
	r := &Rule{Path: rulePath, Algorithm: ratelimit.FixedWindow}
	if v := f["unlimited"]; v != nil {
		r.Unlimited = p.boolean(v, path+".unlimited")
	}
	if v := f["name"]; v != nil {
		r.Name = p.str(v, path+".name")
	}
	if v := f["replaces"]; v != nil {
		if v.Kind != yaml.SequenceNode {
			p.add(v, path+".replaces", "must be a list of {name: ...}, got "+kindName(v))
		} else {
			for i, rn := range v.Content {
				rp := path + ".replaces[" + strconv.Itoa(i) + "]"
				rf := p.mapping(rn, rp, replacesKeys)
				name := ""
				if rf["name"] != nil {
					name = p.str(rf["name"], rp+".name")
				}
				switch {
				case name == "":
					p.add(rn, rp+".name", "must not be empty")
				case name == r.Name:
					p.add(rn, rp+".name", "must not name the rule itself")
				default:
					r.Replaces = append(r.Replaces, name)
				}
			}
		}
	}
	if v := f["on_store_error"]; v != nil {
		r.OnStoreError = p.str(v, path+".on_store_error")
		if r.OnStoreError != "" && !slices.Contains(config.RLSOnStoreError, r.OnStoreError) {
			p.add(v, path+".on_store_error", fmt.Sprintf("must be one of %s, got %q", strings.Join(config.RLSOnStoreError, ", "), r.OnStoreError))
		}
	}
	unit := f["unit"]
	if r.Unlimited {
		for _, k := range []string{"unit", "requests_per_unit", "algorithm", "burst"} {
			if f[k] != nil {
				p.add(f[k], path+"."+k, "must not be set when unlimited is true")
			}
		}
		return done(r, len(p.errs) == before)
	}
	if unit == nil {
		p.add(n, path+".unit", "is required (second, minute, hour, day, week, month or year) unless unlimited is true")
	} else if u, ok := ParseUnit(p.str(unit, path+".unit")); !ok {
		p.add(unit, path+".unit", fmt.Sprintf("must be second, minute, hour, day, week, month or year, got %q", unit.Value))
	} else {
		r.Unit = u
	}
	if v := f["requests_per_unit"]; v == nil {
		p.add(n, path+".requests_per_unit", "is required unless unlimited is true")
	} else {
		r.RequestsPerUnit, _ = p.uint32(v, path+".requests_per_unit")
	}
	if v := f["algorithm"]; v != nil {
		a, err := ratelimit.ParseAlgorithm(p.str(v, path+".algorithm"))
		switch {
		case err != nil:
			p.add(v, path+".algorithm", "must be token_bucket, fixed_window, sliding_window or sliding_log, got "+kindName(v))
		case a == ratelimit.Concurrency:
			p.add(v, path+".algorithm", "concurrency is not available in the decision service: it never learns when a request ends")
		default:
			r.Algorithm = a
		}
	}
	var burst int64
	if v := f["burst"]; v != nil {
		b, ok := p.uint32(v, path+".burst")
		switch {
		case ok && r.Algorithm != ratelimit.TokenBucket:
			p.add(v, path+".burst", "applies to algorithm token_bucket only")
		case ok && b == 0:
			p.add(v, path+".burst", "must be > 0")
		}
		burst = int64(b)
	}
	if len(p.errs) > before {
		return nil
	}
	r.code = algorithmCode(r.Algorithm)
	if r.RequestsPerUnit == 0 {
		return r // banned: no store state
	}
	r.Limit = ratelimit.Limit{Rate: int64(r.RequestsPerUnit), Per: r.Unit.Duration()}
	if r.Algorithm == ratelimit.TokenBucket {
		r.Limit.Burst = orDefault(burst, r.Limit.Rate)
	}
	if err := r.Limit.Validate(r.Algorithm); err != nil {
		var les ratelimit.LimitErrors
		if !errors.As(err, &les) {
			p.add(n, path, err.Error())
		}
		for _, le := range les {
			p.add(n, path+"."+erlFields[le.Field], le.Problem)
		}
		return nil
	}
	return r
}

// erlFields names the file's key for each field of ratelimit.Limit.
var erlFields = map[string]string{"rate": "requests_per_unit", "per": "unit", "burst": "burst", "buckets": "buckets"}

func orDefault(v, def int64) int64 {
	if v > 0 {
		return v
	}
	return def
}

func done(r *Rule, ok bool) *Rule {
	if !ok {
		return nil
	}
	r.code = algorithmCode(r.Algorithm)
	return r
}

// algorithmCode is the short name of an algorithm in store keys.
func algorithmCode(a ratelimit.Algorithm) string {
	switch a {
	case ratelimit.TokenBucket:
		return "tb"
	case ratelimit.SlidingWindow:
		return "sw"
	case ratelimit.SlidingLog:
		return "sl"
	}
	return "fw"
}
