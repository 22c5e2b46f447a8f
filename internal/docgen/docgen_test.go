package main

import (
	"bytes"
	"encoding"
	"errors"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	yaml "go.yaml.in/yaml/v3"

	"github.com/quotagate/quotagate/config"
)

const (
	configDir = "../../config"
	refFile   = "../../docs/reference/configuration.md"
)

// TestReferenceUpToDate fails when the committed reference is not what
// the generator writes from the config package as it is now.
func TestReferenceUpToDate(t *testing.T) {
	want, err := Generate(configDir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(refFile)
	if err != nil {
		t.Fatalf("%v: run `go generate ./config`", err)
	}
	if bytes.Equal(got, want) {
		return
	}
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(g), len(w)) {
		gl, wl := line(g, i), line(w, i)
		if gl != wl {
			t.Fatalf("docs/reference/configuration.md is out of date: run `go generate ./config` and commit it.\n"+
				"First difference, line %d:\ncommitted: %s\ngenerated: %s", i+1, gl, wl)
		}
	}
}

func line(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "(end of file)"
}

// row is a key of the reference, as its table lists it.
type row struct {
	typ, def, reload, env string
}

var (
	rowRE     = regexp.MustCompile("^\\| \\[`([^`]+)`\\]\\(#[^)]*\\) \\| (.*) \\|$")
	headingRE = regexp.MustCompile("^#{2,3} `?([^`]+?)`?$")
	holderRE  = regexp.MustCompile(`<[^>]*>`)
)

// reference reads the committed reference: its key rows by path, and every
// path named by a row or a heading, placeholders written as <>.
func reference(t *testing.T) (rows map[string]row, named map[string]bool) {
	t.Helper()
	b, err := os.ReadFile(refFile)
	if err != nil {
		t.Fatal(err)
	}
	rows, named = map[string]row{}, map[string]bool{}
	for l := range strings.SplitSeq(string(b), "\n") {
		if m := rowRE.FindStringSubmatch(l); m != nil {
			cells := strings.Split(m[2], " | ")
			if len(cells) != 4 {
				t.Fatalf("row %q: want 5 cells", l)
			}
			p := normal(m[1])
			rows[p] = row{typ: cells[0], def: cells[1], reload: cells[2], env: strings.Trim(cells[3], "`")}
			named[p] = true
		} else if m := headingRE.FindStringSubmatch(l); m != nil {
			named[normal(m[1])] = true
		}
	}
	if len(rows) == 0 {
		t.Fatal("the reference lists no keys")
	}
	return rows, named
}

func normal(path string) string { return holderRE.ReplaceAllString(path, "<>") }

var (
	durationType = reflect.TypeFor[time.Duration]()
	textType     = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// decoderPaths lists, by reflection over the mapstructure tags as the
// decoder reads them, every key path below t: fields of structs and of
// what pointers point to, "[]" for the items of a list of mappings, "<>"
// for the names of a map. A duration or a type read from text is a value.
func decoderPaths(prefix string, t reflect.Type, out map[string]bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == durationType || reflect.PointerTo(t).Implements(textType) {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("mapstructure")
			if tag == "" || tag == "-" {
				continue
			}
			p := tag
			if prefix != "" {
				p = prefix + "." + tag
			}
			out[p] = true
			decoderPaths(p, f.Type, out)
		}
	case reflect.Slice:
		decoderPaths(prefix+"[]", t.Elem(), out)
	case reflect.Map:
		p := prefix + ".<>"
		out[p] = true
		decoderPaths(p, t.Elem(), out)
	}
}

// acceptedPaths are the decoder's paths; a route's cost may also be
// written as a block (config.CostBlock, read by Route's decodeKey).
func acceptedPaths() map[string]bool {
	out := map[string]bool{}
	decoderPaths("", reflect.TypeFor[config.Config](), out)
	decoderPaths("routes[].cost", reflect.TypeFor[config.CostBlock](), out)
	return out
}

// TestReferenceCoversDecoderKeys: every key the decoder accepts is a row
// or a heading of the reference.
func TestReferenceCoversDecoderKeys(t *testing.T) {
	_, named := reference(t)
	paths := acceptedPaths()
	if len(paths) < 50 {
		t.Fatalf("found only %d paths: the walk is broken", len(paths))
	}
	for _, p := range sortedKeys(paths) {
		if !named[p] {
			t.Errorf("%s is accepted by the decoder but missing from the reference: run `go generate ./config`", p)
		}
	}
	for p := range named {
		if strings.Contains(p, ".") || strings.Contains(p, "[]") {
			if !paths[p] {
				t.Errorf("%s is in the reference but not among the decoder's keys", p)
			}
		}
	}
}

// TestReferenceKeysAccepted: every key of the reference, written in a
// configuration, is a key the decoder knows (whatever else it says of the
// value), and a key it does not know is reported as unknown.
func TestReferenceKeysAccepted(t *testing.T) {
	rows, _ := reference(t)
	for _, p := range sortedKeys(rows) {
		if problems := unknownKeys(t, p); len(problems) > 0 {
			t.Errorf("%s: the decoder does not accept it: %s", p, strings.Join(problems, "; "))
		}
	}
	for _, p := range []string{"server.no_such_key", "routes[].cost.no_such_key", "policies.<>.lease.no_such_key", "policies.<>.limits.<>.no_such_key"} {
		if len(unknownKeys(t, p)) == 0 {
			t.Errorf("%s: no unknown key reported; the check proves nothing", p)
		}
	}
}

// unknownKeys parses a configuration that writes path (with "a" for each
// name) and returns its unknown-key problems.
func unknownKeys(t *testing.T, path string) []string {
	t.Helper()
	data, err := yaml.Marshal(tree(path, "x"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = config.Parse(data, func(string) (string, bool) { return "", false })
	var errs config.Errors
	if err != nil && !errors.As(err, &errs) {
		t.Fatalf("%s: %v", path, err)
	}
	var out []string
	for _, e := range errs {
		if strings.HasPrefix(e.Problem, "unknown key") {
			out = append(out, e.Error())
		}
	}
	return out
}

// tree is the YAML tree that sets path to leaf.
func tree(path string, leaf any) map[string]any {
	segs := strings.Split(path, ".")
	var build func(i int) any
	build = func(i int) any {
		if i == len(segs) {
			return leaf
		}
		name := segs[i]
		if strings.HasPrefix(name, "<") {
			name = "a"
		}
		list := strings.HasSuffix(name, "[]")
		name = strings.TrimSuffix(name, "[]")
		v := build(i + 1)
		if list {
			v = []any{v}
		}
		return map[string]any{name: v}
	}
	return build(0).(map[string]any)
}

// envLeaves lists the variables that override keys as config/load.go
// finds them: scalars and lists of strings reached through structs and
// struct pointers, never through maps or lists.
func envLeaves(prefix string, t reflect.Type, out map[string]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("mapstructure")
		if tag == "" || tag == "-" {
			continue
		}
		p := tag
		if prefix != "" {
			p = prefix + "." + tag
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft == durationType:
			out[p] = config.EnvPrefix + strings.ToUpper(strings.ReplaceAll(p, ".", "_"))
		case ft.Kind() == reflect.Struct:
			envLeaves(p, ft, out)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.String:
			out[p] = config.EnvPrefix + strings.ToUpper(strings.ReplaceAll(p, ".", "_"))
		case ft.Kind() == reflect.Map || ft.Kind() == reflect.Slice:
		default:
			out[p] = config.EnvPrefix + strings.ToUpper(strings.ReplaceAll(p, ".", "_"))
		}
	}
}

const minimal = `
identity: {anonymous: {tier: t}}
tiers: {t: {}}
upstreams: {u: {url: "echo:"}}
routes: [{name: r, method: GET, path: /, upstream: u}]
`

// TestReferenceEnvVars: the reference names the variable of every key the
// loader lets one override, and of no other; and each variable it names
// reaches its key: set to a value, it changes the key, or Load reports a
// problem of that key (or of the block it sets) from it.
func TestReferenceEnvVars(t *testing.T) {
	rows, _ := reference(t)
	leaves := map[string]string{}
	envLeaves("", reflect.TypeFor[config.Config](), leaves)
	for _, p := range sortedKeys(leaves) {
		if got := rows[p].env; got != leaves[p] {
			t.Errorf("%s: the reference names the variable %q, the loader reads %s", p, got, leaves[p])
		}
	}
	noEnv := func(string) (string, bool) { return "", false }
	base, err := config.Parse([]byte(minimal), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range sortedKeys(rows) {
		name := rows[p].env
		if name == "—" {
			continue
		}
		if _, ok := leaves[p]; !ok {
			t.Errorf("%s: the reference names %s, which the loader does not read", p, name)
			continue
		}
		getenv := func(n string) (string, bool) {
			if n == name {
				return "zz9", true
			}
			return "", false
		}
		c, err := config.Parse([]byte(minimal), getenv)
		if err == nil {
			if reflect.DeepEqual(valueAt(base, p), valueAt(c, p)) {
				t.Errorf("%s=zz9 left %s as it was", name, p)
			}
			continue
		}
		var errs config.Errors
		if !errors.As(err, &errs) {
			t.Fatalf("%s: %v", name, err)
		}
		parent := p[:strings.LastIndex(p, ".")+1]
		if !slices.ContainsFunc(errs, func(e *config.FieldError) bool {
			return strings.HasSuffix(e.Problem, "(from "+name+")") || strings.HasPrefix(e.Path, parent)
		}) {
			t.Errorf("%s=zz9: no problem of %s or from the variable: %v", name, p, err)
		}
	}
}

// valueAt is the value at path in c, following mapstructure tags through
// structs and pointers; nil when a pointer on the way is nil.
func valueAt(c *config.Config, path string) any {
	v := reflect.ValueOf(c).Elem()
	for seg := range strings.SplitSeq(path, ".") {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return nil
			}
			v = v.Elem()
		}
		found := false
		for i := range v.NumField() {
			if v.Type().Field(i).Tag.Get("mapstructure") == seg {
				v, found = v.Field(i), true
				break
			}
		}
		if !found {
			return nil
		}
	}
	return v.Interface()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
