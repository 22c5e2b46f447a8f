package main

import (
	"go/ast"
	"reflect"
	"regexp"
	"strconv"
	"strings"
)

// kind is how the decoder reads a key's value.
type kind int

const (
	kUnknown  kind = iota
	kString        // a YAML string
	kBool          // true or false
	kInt           // a whole number
	kFloat         // a number, fractions allowed
	kDuration      // a Go duration such as 250ms
	kText          // a string read by the type's UnmarshalText (an enum)
	kStruct        // a mapping of keys
	kSlice         // a list
	kMap           // a mapping of names to values
)

// typ is a field's Go type as the decoder sees it.
type typ struct {
	kind kind
	ptr  bool   // written as a pointer: absent means nil
	elem *typ   // of a slice or map
	pkg  *pkg   // of a named type
	name string // of a named type
	st   *ast.StructType
}

var builtinKinds = map[string]kind{
	"string": kString, "bool": kBool,
	"int": kInt, "int8": kInt, "int16": kInt, "int32": kInt, "int64": kInt,
	"uint": kInt, "uint8": kInt, "uint16": kInt, "uint32": kInt, "uint64": kInt,
	"float32": kFloat, "float64": kFloat,
}

// resolve returns the type that e, a type written in pk, denotes.
func (pk *pkg) resolve(e ast.Expr) *typ {
	switch e := e.(type) {
	case *ast.StarExpr:
		t := *pk.resolve(e.X)
		t.ptr = true
		return &t
	case *ast.ArrayType:
		if e.Len != nil {
			return &typ{kind: kUnknown}
		}
		return &typ{kind: kSlice, elem: pk.resolve(e.Elt)}
	case *ast.MapType:
		return &typ{kind: kMap, elem: pk.resolve(e.Value)}
	case *ast.Ident:
		if k, ok := builtinKinds[e.Name]; ok {
			return &typ{kind: k}
		}
		return pk.named(e.Name)
	case *ast.SelectorExpr:
		x, _ := e.X.(*ast.Ident)
		if x == nil {
			return &typ{kind: kUnknown}
		}
		if x.Name == "time" && e.Sel.Name == "Duration" {
			return &typ{kind: kDuration}
		}
		if other := pk.imported(x.Name); other != nil {
			return other.named(e.Sel.Name)
		}
	}
	return &typ{kind: kUnknown}
}

// named returns the type declared as name in pk. A type with an
// UnmarshalText method is read from a string, as the decoder reads it.
func (pk *pkg) named(name string) *typ {
	d, ok := pk.types[name]
	if !ok {
		return &typ{kind: kUnknown, pkg: pk, name: name}
	}
	if _, ok := pk.methods[name]["UnmarshalText"]; ok {
		return &typ{kind: kText, pkg: pk, name: name}
	}
	if st, ok := d.spec.Type.(*ast.StructType); ok {
		return &typ{kind: kStruct, pkg: pk, name: name, st: st}
	}
	t := *pk.resolve(d.spec.Type)
	t.pkg, t.name = pk, name
	return &t
}

// field is one decodable field of a struct.
type field struct {
	goName string
	tag    string
	typ    *typ
	doc    string // its doc comment, or the one it shares with the field before
}

// fields lists the fields of t (a struct) that have a mapstructure tag, in
// order.
func (t *typ) fields() []field {
	var out []field
	prevDoc := ""
	for _, f := range t.st.Fields.List {
		doc := f.Doc.Text()
		for _, n := range f.Names {
			// "CertFile and KeyFile are ..." documents the next field too.
			if doc == "" && mentions(prevDoc, n.Name) {
				doc = prevDoc
			}
			tag := tagOf(f)
			if tag != "" && tag != "-" {
				out = append(out, field{goName: n.Name, tag: tag, typ: t.pkg.resolve(f.Type), doc: doc})
			}
			prevDoc = doc
		}
		if f.Doc.Text() != "" {
			prevDoc = f.Doc.Text()
		}
	}
	return out
}

func tagOf(f *ast.Field) string {
	if f.Tag == nil {
		return ""
	}
	s, err := strconv.Unquote(f.Tag.Value)
	if err != nil {
		return ""
	}
	return reflect.StructTag(s).Get("mapstructure")
}

func mentions(text, word string) bool {
	return text != "" && regexp.MustCompile(`\b`+regexp.QuoteMeta(word)+`\b`).MatchString(text)
}

// key is one entry of the reference.
type key struct {
	path    string
	section string
	typ     *typ
	alt     alternative // other shapes the decoder accepts for it
	goName  string      // "" for the element of a map
	parent  *typ        // the struct declaring it
	doc     string      // the doc comment, as written
	typeDoc string      // the doc comment of its type, when a mapping
	def     string      // default, as Markdown; "" when none is stated
	reload  bool        // a reload applies it
	env     string      // the environment variable, or ""
	enum    []string    // the values it accepts, when they are listed
}

// at is where the walk is: the path so far and what holds on it.
type at struct {
	path      string
	section   string
	env       bool          // no map or list on the way: variables reach it
	startOnly bool          // a key on the way is read at start only
	dflt      reflect.Value // the value Default gives it, when it gives one
	parentDoc string        // the doc of the key holding this struct
}

// walker collects the keys of the configuration.
type walker struct {
	cfg  *pkg
	keys []*key
	alts map[string]map[string]alternative // struct name → key → shapes

	mustBeCache map[string][]string
}

// walkStruct adds the fields of t, a struct, below a.
func (w *walker) walkStruct(t *typ, a at) {
	for _, f := range t.fields() {
		child := a
		child.path = join(a.path, f.tag)
		if a.section == "" {
			child.section = f.tag
		}
		child.dflt = fieldValue(a.dflt, f.goName)
		k := &key{path: child.path, section: child.section, typ: f.typ, goName: f.goName, parent: t, doc: f.doc}
		k.alt = w.alternatives(t)[f.tag]
		if k.doc == "" && f.typ.kind != kStruct {
			k.doc = typeDoc(f.typ) // an enum's own doc, as CalendarUnit's
		}
		if f.typ.kind == kStruct {
			k.typeDoc = typeDoc(f.typ)
		}
		if f.typ.kind == kSlice && f.typ.elem.kind == kStruct {
			k.typeDoc = typeDoc(f.typ.elem)
		}
		child.startOnly = a.startOnly || startOnly(k.doc) || startOnly(k.typeDoc)
		k.reload = !child.startOnly
		k.env = envName(child, f.typ)
		k.enum = w.enum(t, f, child.path)
		k.def = w.defaultOf(k, child, a.parentDoc)
		w.keys = append(w.keys, k)
		child.parentDoc = k.doc
		w.below(k, f.typ, child)
		for _, s := range k.alt.structs {
			w.walkStruct(s, child)
		}
	}
}

// below walks what t, the type of key k at a, holds.
func (w *walker) below(k *key, t *typ, a at) {
	switch t.kind {
	case kStruct:
		a.dflt = deref(a.dflt)
		if !a.dflt.IsValid() {
			if h, ok := helpers[a.path]; ok {
				a.dflt = reflect.ValueOf(h())
			}
		}
		w.walkStruct(t, a)
	case kSlice:
		if t.elem.kind == kStruct {
			a.path += "[]"
			a.env, a.dflt = false, reflect.Value{}
			w.walkStruct(t.elem, a)
		}
	case kMap:
		a.path = join(a.path, placeholder(k.doc))
		a.env, a.dflt = false, reflect.Value{}
		e := &key{path: a.path, section: a.section, typ: t.elem, parent: k.parent, reload: !a.startOnly}
		if t.elem.kind == kStruct {
			e.typeDoc = typeDoc(t.elem)
		}
		w.keys = append(w.keys, e)
		w.below(e, t.elem, a)
	}
}

// placeholder names the keys of a map in paths: <tier> for a map "per tier
// name", <name> otherwise.
func placeholder(doc string) string {
	if m := perNameRE.FindStringSubmatch(doc); m != nil {
		return "<" + strings.ToLower(m[1]) + ">"
	}
	return "<name>"
}

var perNameRE = regexp.MustCompile(`\bper (\w+) name\b`)

func typeDoc(t *typ) string {
	if t.pkg == nil {
		return ""
	}
	if d, ok := t.pkg.types[t.name]; ok {
		return d.doc
	}
	return ""
}

var startOnlyRE = regexp.MustCompile(`(?i)\bread at start only\b`)

// startOnly reports whether doc says its key is read at start only.
func startOnly(doc string) bool { return startOnlyRE.MatchString(oneLine(doc)) }

// envName is the variable that overrides the key at a of type t, named as
// the loader names it (config.EnvPrefix, the path uppercase, "_" for "."):
// a scalar or a list of strings reached through structs and struct
// pointers only, never through a map or a list. A struct decoded from
// text has no tagged fields for the loader to reach.
func envName(a at, t *typ) string {
	if !a.env {
		return ""
	}
	switch t.kind {
	case kStruct, kMap, kUnknown:
		return ""
	case kSlice:
		if t.elem.kind != kString {
			return ""
		}
	case kText:
		if d, ok := t.pkg.types[t.name]; ok {
			if _, isStruct := d.spec.Type.(*ast.StructType); isStruct {
				return ""
			}
		}
	}
	return envPrefix + strings.ToUpper(strings.ReplaceAll(a.path, ".", "_"))
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// fieldValue returns the field goName of v, a struct or a pointer to one; the
// invalid Value when v is invalid or a nil pointer.
func fieldValue(v reflect.Value, goName string) reflect.Value {
	v = deref(v)
	if !v.IsValid() || v.Kind() != reflect.Struct {
		return reflect.Value{}
	}
	return v.FieldByName(goName)
}

// deref follows pointers; a nil one gives the invalid Value.
func deref(v reflect.Value) reflect.Value {
	for v.IsValid() && v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return reflect.Value{}
		}
		v = v.Elem()
	}
	return v
}

// alternative is what a struct's decodeKey accepts for one of its keys
// besides the field's own shape: the structs it decodes the key into (a
// route's cost written as a block) and the words it takes (lease: auto).
type alternative struct {
	structs []*typ
	words   []string
}

// alternatives reads the decodeKey method of t, if any: the keys it
// compares with ("key != \"cost\""), the struct literals it decodes into
// and the words it compares values with (strings.EqualFold).
func (w *walker) alternatives(t *typ) map[string]alternative {
	if m, ok := w.alts[t.name]; ok {
		return m
	}
	m := map[string]alternative{}
	w.alts[t.name] = m
	fn := t.pkg.methods[t.name]["decodeKey"]
	if fn == nil {
		return m
	}
	var keyName string
	var alt alternative
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BinaryExpr:
			if id, ok := n.X.(*ast.Ident); ok && id.Name == "key" {
				if lit, ok := n.Y.(*ast.BasicLit); ok {
					keyName, _ = strconv.Unquote(lit.Value)
				}
			}
		case *ast.CompositeLit:
			if id, ok := n.Type.(*ast.Ident); ok {
				if s := t.pkg.named(id.Name); s.kind == kStruct {
					alt.structs = append(alt.structs, s)
				}
			}
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "EqualFold" {
				for _, arg := range n.Args {
					if lit, ok := arg.(*ast.BasicLit); ok {
						word, _ := strconv.Unquote(lit.Value)
						alt.words = append(alt.words, word)
					}
				}
			}
		}
		return true
	})
	if keyName == "" {
		return m
	}
	// A struct of the field's own type is no other shape.
	own := ""
	for _, f := range t.fields() {
		if f.tag == keyName {
			own = f.typ.name
		}
	}
	var structs []*typ
	for _, s := range alt.structs {
		if s.name != own {
			structs = append(structs, s)
		}
	}
	alt.structs = structs
	m[keyName] = alt
	return m
}
