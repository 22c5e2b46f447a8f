package config

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"

	"github.com/spf13/viper"
	yaml "go.yaml.in/yaml/v3"
)

// EnvPrefix starts the name of every environment variable that overrides a
// key: QUOTAGATE_ then the key's path, uppercase, with "_" for ".", as in
// QUOTAGATE_STORE_REDIS_ADDRS for store.redis.addrs.
const EnvPrefix = "QUOTAGATE_"

// Load reads the YAML file at path with viper and returns the validated
// configuration. Keys are decoded strictly, defaults fill what the file
// leaves out, Normalize puts it in its form and Validate checks it.
//
// Environment variables override keys of the fixed sections (server, store,
// identity.jwt, identity.anonymous, log, rls): QUOTAGATE_STORE_KIND=redis sets
// store.kind. A list takes a comma-separated value
// (QUOTAGATE_STORE_REDIS_ADDRS=a:6379,b:6379). An empty variable is ignored.
// Keys under tiers, policies, upstreams, routes and identity.api_keys have no
// variables: their names may contain the separators. getenv looks variables
// up; nil means os.LookupEnv.
//
// A configuration problem (unknown key, value of the wrong type, failed
// validation) makes Load return Errors holding every problem found; the
// problem of a value set from a variable (or of an item of its list) ends
// with " (from NAME)", naming the variable. Any
// other error (unreadable file, malformed YAML) is returned wrapped, naming
// the file.
func Load(path string, getenv func(string) (string, bool)) (*Config, error) {
	cfg, _, err := LoadDigest(path, getenv)
	return cfg, err
}

// LoadDigest is Load that also returns the Digest of the bytes it read and
// parsed (the zero Digest when the file could not be read), so that a
// watcher started later compares the file with what was loaded, not with
// what the file holds by the time the watcher starts.
func LoadDigest(path string, getenv func(string) (string, bool)) (*Config, Digest, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, Digest{}, fmt.Errorf("config %s: %w", path, err)
	}
	d := sha256.Sum256(data)
	v, codec := newViper()
	if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
		return nil, d, fmt.Errorf("config %s: %w", path, unwrapParse(err))
	}
	cfg, err := build(v, codec, getenv)
	return cfg, d, err
}

// Parse is Load for a configuration held in memory.
func Parse(data []byte, getenv func(string) (string, bool)) (*Config, error) {
	v, codec := newViper()
	if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
		return nil, fmt.Errorf("config: %w", unwrapParse(err))
	}
	return build(v, codec, getenv)
}

// newViper returns a viper that reads YAML with yamlCodec. Its key delimiter
// "::" is one no key contains, so viper never splits a name with dots.
func newViper() (*viper.Viper, *yamlCodec) {
	codec := &yamlCodec{}
	reg := viper.NewCodecRegistry()
	_ = reg.RegisterCodec("yaml", codec) // never fails (viper v1.21)
	v := viper.NewWithOptions(viper.KeyDelimiter("::"), viper.WithDecoderRegistry(reg))
	v.SetConfigType("yaml")
	return v, codec
}

// unwrapParse drops viper's "While parsing config:" wrapper, keeping the
// YAML error with its line number.
func unwrapParse(err error) error {
	var pe viper.ConfigParseError
	if errors.As(err, &pe) {
		if inner := pe.Unwrap(); inner != nil {
			return inner
		}
	}
	return err
}

func build(v *viper.Viper, codec *yamlCodec, getenv func(string) (string, bool)) (*Config, error) {
	if getenv == nil {
		getenv = os.LookupEnv
	}
	// viper's AllSettings drops empty mappings and keys without a value,
	// which here carry meaning (`free: {}` is a tier), so the tree is taken
	// a whole top-level section at a time.
	tree := make(map[string]any, len(codec.topKeys))
	for _, k := range codec.topKeys {
		tree[k] = v.Get(k)
	}
	d := &decoder{errs: codec.errs, env: applyEnv(tree, getenv)}
	c := Default()
	d.decode("", tree, reflect.ValueOf(c).Elem())

	var errs Errors
	c.Normalize()
	if err := c.Validate(); err != nil {
		errs = err.(Errors)
	}
	// A value that could not be decoded was left at its default; what
	// validation says about it (or below it) would only repeat the problem.
	// A value from a variable names it, as a problem of decoding does.
	all := d.errs
	for _, e := range errs {
		if !coveredBy(e.Path, d.errs) {
			e.Problem = sourced(d.env, e.Path, e.Problem)
			all = append(all, e)
		}
	}
	if len(all) > 0 {
		return nil, all.sort()
	}
	c.env = d.env
	return c, nil
}

// Sourced returns err, problems of c found after Load (such as a variable
// that a *_env key names being unset), with the problem of each value that
// came from an environment variable followed by " (from NAME)", as Load's
// own problems are. An err that is not Errors is returned as it is.
func (c *Config) Sourced(err error) error {
	errs, ok := err.(Errors)
	if !ok {
		return err
	}
	out := make(Errors, len(errs))
	for i, e := range errs {
		out[i] = &FieldError{Path: e.Path, Problem: sourced(c.env, e.Path, e.Problem)}
	}
	return out
}

func coveredBy(path string, errs Errors) bool {
	for _, e := range errs {
		if under(path, e.Path) {
			return true
		}
	}
	return false
}

// yamlCodec decodes YAML for viper, lowercasing keys itself so that it can
// report two keys of one mapping that differ only in case (viper would keep
// one of them at random).
type yamlCodec struct {
	errs    Errors
	topKeys []string
}

// Decode implements viper.Decoder.
func (c *yamlCodec) Decode(b []byte, out map[string]any) error {
	var raw map[string]any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return yamlSyntaxError(err, b)
	}
	lowered := c.lower("", raw).(map[string]any)
	for k, val := range lowered {
		out[k] = val
		c.topKeys = append(c.topKeys, k)
	}
	return nil
}

// Encode implements viper.Encoder; configurations are never written.
func (c *yamlCodec) Encode(map[string]any) ([]byte, error) {
	return nil, errors.New("config: encoding is not supported")
}

func (c *yamlCodec) lower(path string, val any) any {
	switch v := val.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		spelled := make(map[string]string, len(v))
		for _, k := range sortedKeys(v) {
			lk := strings.ToLower(k)
			p := join(path, lk)
			if first, dup := spelled[lk]; dup {
				c.errs.addf(p, "written twice, as %q and %q (keys and names are case-insensitive)", first, k)
				continue
			}
			spelled[lk] = k
			out[lk] = c.lower(p, v[k])
		}
		return out
	case map[any]any:
		// A mapping with a key that is not a string, such as 1: or true:.
		m := make(map[string]any, len(v))
		for k, item := range v {
			m[fmt.Sprint(k)] = item
		}
		return c.lower(path, m)
	case []any:
		out := make([]any, len(v))
		for i, item := range v {
			out[i] = c.lower(index(path, i), item)
		}
		return out
	default:
		return val
	}
}

// applyEnv sets the keys that environment variables override in tree and
// returns the paths it set with the variables' names.
func applyEnv(tree map[string]any, getenv func(string) (string, bool)) map[string]string {
	set := make(map[string]string)
	for _, leaf := range envLeaves("", reflect.TypeFor[Config]()) {
		name := EnvPrefix + strings.ToUpper(strings.ReplaceAll(leaf.path, ".", "_"))
		raw, ok := getenv(name)
		if !ok || raw == "" {
			continue
		}
		var val any = raw
		if leaf.list {
			var items []any
			for item := range strings.SplitSeq(raw, ",") {
				if item = strings.TrimSpace(item); item != "" {
					items = append(items, item)
				}
			}
			val = items
		}
		if setPath(tree, strings.Split(leaf.path, "."), val) {
			set[leaf.path] = name
		}
	}
	return set
}

type envLeaf struct {
	path string
	list bool
}

// envLeaves lists the keys of t that environment variables can set: scalar
// and list-of-string fields reached through structs and struct pointers,
// never through maps or lists of structs.
func envLeaves(prefix string, t reflect.Type) []envLeaf {
	var leaves []envLeaf
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("mapstructure")
		if tag == "" || tag == "-" {
			continue
		}
		path := tag
		if prefix != "" {
			path = prefix + "." + tag
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft == durationType:
			leaves = append(leaves, envLeaf{path: path})
		case ft.Kind() == reflect.Struct:
			leaves = append(leaves, envLeaves(path, ft)...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.String:
			leaves = append(leaves, envLeaf{path: path, list: true})
		case ft.Kind() == reflect.Map || ft.Kind() == reflect.Slice:
		default:
			leaves = append(leaves, envLeaf{path: path})
		}
	}
	return leaves
}

// setPath stores val at keys in tree, creating mappings on the way. It
// leaves the tree alone and reports false when a key on the way holds
// something other than a mapping: the decoder reports that value.
func setPath(tree map[string]any, keys []string, val any) bool {
	m := tree
	for _, k := range keys[:len(keys)-1] {
		switch next := m[k].(type) {
		case map[string]any:
			m = next
		case nil:
			child := map[string]any{}
			m[k] = child
			m = child
		default:
			return false
		}
	}
	m[keys[len(keys)-1]] = val
	return true
}
