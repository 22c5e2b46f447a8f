package config

import (
	"encoding"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// decoder copies a YAML tree (maps with lowercase keys, lists and scalars,
// as go.yaml.in/yaml/v3 produces them) into the Config types, strictly: a
// key without a field is an error, and so is a value of the wrong shape.
// Fields are matched by their `mapstructure` tag; a field tagged "-" or not
// tagged is never decoded. It records every problem and keeps going, leaving
// a field it could not decode at its default, except a typed value (a field
// whose type implements encoding.TextUnmarshaler, such as an algorithm),
// which is left zero so that validation checks nothing that depends on it.
type decoder struct {
	errs Errors
	// env maps the paths set from environment variables to the variable's
	// name, so that a problem with such a value names its source.
	env map[string]string
}

func (d *decoder) fail(path, problem string) {
	d.errs.add(path, sourced(d.env, path, problem))
}

// sourced returns problem, the problem of the value at path, followed by
// " (from NAME)" when env says that value, or the one it is part of (a
// list's item), was set from the environment variable NAME, so that whoever
// reads the problem looks for it in the environment rather than in the file.
func sourced(env map[string]string, path, problem string) string {
	for p, name := range env {
		// Variables set leaves, none below another: at most one matches.
		if under(path, p) {
			return problem + " (from " + name + ")"
		}
	}
	return problem
}

var (
	durationType        = reflect.TypeFor[time.Duration]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// decode stores in into out. A nil in (a key written without a value) leaves
// out as it is.
func (d *decoder) decode(path string, in any, out reflect.Value) {
	if in == nil {
		return
	}
	if out.Type() == durationType {
		d.duration(path, in, out)
		return
	}
	if out.CanAddr() && out.Addr().Type().Implements(textUnmarshalerType) {
		d.text(path, in, out)
		return
	}
	switch out.Kind() {
	case reflect.Pointer:
		if out.IsNil() {
			v := reflect.New(out.Type().Elem())
			applyDefaults(v)
			out.Set(v)
		}
		d.decode(path, in, out.Elem())
	case reflect.Struct:
		d.structure(path, in, out)
	case reflect.Map:
		d.mapping(path, in, out)
	case reflect.Slice:
		d.list(path, in, out)
	case reflect.String:
		d.str(path, in, out)
	case reflect.Bool:
		d.boolean(path, in, out)
	case reflect.Int, reflect.Int64:
		d.integer(path, in, out)
	case reflect.Float64:
		d.number(path, in, out)
	default:
		// Only reachable if a field of an unsupported type gets a tag.
		d.fail(path, fmt.Sprintf("cannot decode into %s", out.Type()))
	}
}

// applyDefaults calls setDefaults when v (a pointer) has defaults.
func applyDefaults(v reflect.Value) {
	if df, ok := v.Interface().(defaulter); ok {
		df.setDefaults()
	}
}

func (d *decoder) structure(path string, in any, out reflect.Value) {
	m, ok := in.(map[string]any)
	if name, isName := in.(string); isName && out.CanAddr() {
		if nd, ok := out.Addr().Interface().(nameDecoder); ok {
			nd.decodeName(name)
			return
		}
	}
	if !ok {
		d.fail(path, "must be a mapping, got "+describe(in))
		return
	}
	fields := fieldsOf(out.Type())
	var kd keyDecoder
	if out.CanAddr() {
		kd, _ = out.Addr().Interface().(keyDecoder)
	}
	for _, key := range sortedKeys(m) {
		if kd != nil && kd.decodeKey(d, join(path, key), key, m[key]) {
			continue
		}
		i, ok := fields[key]
		if !ok {
			d.fail(join(path, key), unknownKey(key, fields))
			continue
		}
		d.decode(join(path, key), m[key], out.Field(i))
	}
}

// keyDecoder is a config type one of whose keys may be written in a shape
// its field does not have (such as a route's cost, a number or a block).
// decodeKey decodes in, the value of key at path, and reports whether it
// did; otherwise the key is decoded into its field as usual.
type keyDecoder interface {
	decodeKey(d *decoder, path, key string, in any) bool
}

// nameDecoder is a config type that may be written as a name alone, in
// place of its mapping (a route's policy: `rpm` for `{name: rpm}`).
type nameDecoder interface {
	decodeName(name string)
}

// fieldsOf maps the tag names of t's decodable fields to field indexes.
func fieldsOf(t reflect.Type) map[string]int {
	fields := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		tag := t.Field(i).Tag.Get("mapstructure")
		if tag != "" && tag != "-" {
			fields[tag] = i
		}
	}
	return fields
}

// unknownKey is the problem of a key that names no field, with the closest
// known key as a hint when one is near.
func unknownKey(key string, fields map[string]int) string {
	best, bestDist := "", 3
	for name := range fields {
		if dist := editDistance(key, name); dist < bestDist || dist == bestDist && name < best {
			best, bestDist = name, dist
		}
	}
	if best == "" || bestDist > len(key)/2 {
		return "unknown key"
	}
	return fmt.Sprintf("unknown key (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func (d *decoder) mapping(path string, in any, out reflect.Value) {
	m, ok := in.(map[string]any)
	if !ok {
		d.fail(path, "must be a mapping, got "+describe(in))
		return
	}
	if out.IsNil() {
		out.Set(reflect.MakeMapWithSize(out.Type(), len(m)))
	}
	for _, key := range sortedKeys(m) {
		elem := reflect.New(out.Type().Elem())
		applyDefaults(elem)
		d.decode(join(path, key), m[key], elem.Elem())
		out.SetMapIndex(reflect.ValueOf(key), elem.Elem())
	}
}

func (d *decoder) list(path string, in any, out reflect.Value) {
	items, ok := in.([]any)
	if !ok {
		d.fail(path, "must be a list, got "+describe(in))
		return
	}
	s := reflect.MakeSlice(out.Type(), len(items), len(items))
	for i, item := range items {
		elem := s.Index(i)
		applyDefaults(elem.Addr())
		if item == nil {
			d.fail(index(path, i), "must not be empty")
			continue
		}
		d.decode(index(path, i), item, elem)
	}
	out.Set(s)
}

func (d *decoder) str(path string, in any, out reflect.Value) {
	switch v := in.(type) {
	case string:
		out.SetString(v)
	case int, int64, uint64:
		// A bare number where a name is expected, such as tenant: 42.
		out.SetString(fmt.Sprint(v))
	default:
		d.fail(path, "must be a string, got "+describe(in)+" (quote it)")
	}
}

// text decodes a name into a typed value through its UnmarshalText, whose
// error is the problem reported.
func (d *decoder) text(path string, in any, out reflect.Value) {
	s, ok := in.(string)
	if !ok {
		out.SetZero()
		d.fail(path, "must be a string, got "+describe(in))
		return
	}
	if err := out.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
		out.SetZero()
		d.fail(path, err.Error())
	}
}

func (d *decoder) boolean(path string, in any, out reflect.Value) {
	switch v := in.(type) {
	case bool:
		out.SetBool(v)
	case string:
		b, err := strconv.ParseBool(v)
		if err != nil {
			d.fail(path, fmt.Sprintf("must be true or false, got %q", v))
			return
		}
		out.SetBool(b)
	default:
		d.fail(path, "must be true or false, got "+describe(in))
	}
}

// number decodes a number that may have a fraction (YAML 0.2, or a
// string such as "0.2" from the environment); NaN and infinities are
// refused.
func (d *decoder) number(path string, in any, out reflect.Value) {
	var f float64
	switch v := in.(type) {
	case int:
		f = float64(v)
	case int64:
		f = float64(v)
	case uint64:
		f = float64(v)
	case float64:
		f = v
	case string:
		var err error
		if f, err = strconv.ParseFloat(strings.TrimSpace(v), 64); err != nil {
			d.fail(path, fmt.Sprintf("must be a number, got %q", v))
			return
		}
	default:
		d.fail(path, "must be a number, got "+describe(in))
		return
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		d.fail(path, "must be a finite number")
		return
	}
	out.SetFloat(f)
}

func (d *decoder) integer(path string, in any, out reflect.Value) {
	var n int64
	switch v := in.(type) {
	case int:
		n = int64(v)
	case int64:
		n = v
	case uint64:
		if v > math.MaxInt64 {
			d.fail(path, "is too large")
			return
		}
		n = int64(v)
	case float64:
		if v != math.Trunc(v) || math.IsInf(v, 0) || math.IsNaN(v) {
			d.fail(path, "must be a whole number, got "+describe(in))
			return
		}
		if v < -(1<<63) || v >= 1<<63 {
			d.fail(path, "is too large")
			return
		}
		n = int64(v)
	case string:
		parsed, err := strconv.ParseInt(strings.ReplaceAll(v, "_", ""), 10, 64)
		if err != nil {
			d.fail(path, fmt.Sprintf("must be a whole number, got %q", v))
			return
		}
		n = parsed
	default:
		d.fail(path, "must be a whole number, got "+describe(in))
		return
	}
	if out.OverflowInt(n) {
		d.fail(path, "is too large")
		return
	}
	out.SetInt(n)
}

func (d *decoder) duration(path string, in any, out reflect.Value) {
	const want = "must be a duration such as 250ms, 1s or 1m"
	switch v := in.(type) {
	case string:
		dur, err := time.ParseDuration(v)
		if err != nil {
			d.fail(path, fmt.Sprintf("%s, got %q", want, v))
			return
		}
		out.SetInt(int64(dur))
	case int:
		if v != 0 {
			d.fail(path, fmt.Sprintf("%s, got %d (missing unit)", want, v))
			return
		}
		out.SetInt(0)
	default:
		d.fail(path, want+", got "+describe(in))
	}
}

// describe names the kind of a YAML value for a problem message.
func describe(in any) string {
	switch v := in.(type) {
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case string:
		return strconv.Quote(v)
	case bool, int, int64, uint64, float64:
		return fmt.Sprint(v)
	default:
		return fmt.Sprintf("%T", v)
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
