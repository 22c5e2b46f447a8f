package main

import (
	"cmp"
	"encoding"
	"fmt"
	"go/ast"
	"go/constant"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/quotagate/quotagate/config"
)

const envPrefix = config.EnvPrefix

// helpers give the defaults of the sections that Default leaves nil,
// through the exported functions that fill them in.
var helpers = map[string]func() any{
	"server.quota_reads": func() any { return config.Default().Server.Reads() },
}

// defaultOf states the default of k at a as Markdown: the value Default
// gives it when it gives one, else what its doc comment says (or, for a
// key like time_zone, what the doc of the key holding it says), else "".
func (w *walker) defaultOf(k *key, a at, parentDoc string) string {
	if a.dflt.IsValid() {
		return formatValue(a.dflt, k)
	}
	if raw, ok := docDefault(k.doc); ok {
		return w.renderDefault(raw, k)
	}
	if raw, ok := childDefault(parentDoc, lastSegment(k.path)); ok {
		return w.renderDefault(raw, k)
	}
	switch {
	case requiredRE.MatchString(oneLine(k.doc)):
		return "required"
	case k.typ.ptr && nilMeansRE.MatchString(oneLine(k.doc)):
		return "not set"
	}
	return ""
}

var (
	// "(default 5s)", "default 30s, at least 1s", "Default 1024; ...".
	defaultWordRE = regexp.MustCompile(`(?:^|[\s(])[Dd]efault `)
	defaultEndRE  = regexp.MustCompile(`[;)]|, | when |: |\.(?:\s|$)|$`)
	// `"direct" (default)`, `info (the default)`, `open (allow; the default)`.
	theDefaultRE = regexp.MustCompile(`(\S+) \((?:[^()]*?; )?(?:the )?default[):;,]`)
	// "0 or left out means 64", "Absent or 0 means store.fleet_size".
	leftOutRE = regexp.MustCompile(`(?i)\b(?:left out|absent)(?: \([^)]*\))?(?: or 0)? means ([\w.]*\w)`)
	// "otherwise it defaults to Reserve".
	itDefaultsRE = regexp.MustCompile(`\bit defaults to ([\w."/]*\w"?)`)
	requiredRE   = regexp.MustCompile(`\(required\b|\b[Ii]t is required\b`)
	nilMeansRE   = regexp.MustCompile(`\bnil means\b`)
)

// docDefault finds the default that doc states.
func docDefault(doc string) (string, bool) {
	text := oneLine(doc)
	for _, m := range defaultWordRE.FindAllStringIndex(text, -1) {
		before := strings.Fields(text[:m[0]+1])
		if n := len(before); n > 0 {
			switch strings.ToLower(strings.Trim(before[n-1], "(")) {
			case "the", "a", "by", "its":
				continue
			}
		}
		rest := text[m[1]:]
		end := defaultEndRE.FindStringIndex(rest)
		if v := strings.TrimSpace(rest[:end[0]]); v != "" {
			return v, true
		}
	}
	if m := theDefaultRE.FindStringSubmatch(text); m != nil {
		return strings.TrimRight(m[1], ","), true
	}
	if m := leftOutRE.FindStringSubmatch(text); m != nil {
		return m[1], true
	}
	if m := itDefaultsRE.FindStringSubmatch(text); m != nil {
		return m[1], true
	}
	return "", false
}

// childDefault finds "tag defaults to X" in doc, the doc of the key that
// holds the key named tag.
func childDefault(doc, tag string) (string, bool) {
	re := regexp.MustCompile(`\b` + regexp.QuoteMeta(tag) + ` defaults to ([\w."/]*\w"?)`)
	if m := re.FindStringSubmatch(oneLine(doc)); m != nil {
		return m[1], true
	}
	return "", false
}

func oneLine(doc string) string { return strings.Join(strings.Fields(doc), " ") }

func lastSegment(path string) string { return path[strings.LastIndex(path, ".")+1:] }

var plainValueRE = regexp.MustCompile(`^[\w.:/*-]+$`)

// renderDefault writes raw, a default as a doc comment states it, as
// Markdown: a constant by its value, a field of the same struct by its
// key, a literal as code and a phrase ("10 MiB") as it is.
func (w *walker) renderDefault(raw string, k *key) string {
	raw = strings.Trim(raw, `"`)
	switch strings.ToLower(raw) {
	case "empty":
		return "empty"
	case "":
		return "empty"
	}
	if _, ok := w.cfg.consts[raw]; ok && isExported(raw) {
		if v, err := w.cfg.constValue(raw); err == nil {
			return code(formatConst(v))
		}
	}
	if k.parent != nil {
		for _, f := range k.parent.fields() {
			if f.goName == raw {
				return "same as " + code(f.tag)
			}
		}
	}
	if plainValueRE.MatchString(raw) {
		if strings.Contains(raw, ".") && !strings.ContainsAny(raw, "0123456789") {
			return "same as " + code(raw) // another key, such as store.fleet_size
		}
		return code(raw)
	}
	return escapeText(raw)
}

// formatValue writes v, a value of Default, as Markdown.
func formatValue(v reflect.Value, k *key) string {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return "not set"
		}
		v = v.Elem()
	}
	if v.CanInterface() {
		if tm, ok := v.Interface().(encoding.TextMarshaler); ok {
			b, err := tm.MarshalText()
			if err != nil {
				return ""
			}
			return code(string(b))
		}
	}
	if v.Type() == reflect.TypeFor[time.Duration]() {
		return code(fmtDuration(time.Duration(v.Int())))
	}
	switch v.Kind() {
	case reflect.String:
		if v.String() == "" {
			return "empty"
		}
		return code(v.String())
	case reflect.Bool:
		return code(strconv.FormatBool(v.Bool()))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n := v.Int()
		s := code(strconv.FormatInt(n, 10))
		if tag := lastSegment(k.path); (strings.HasSuffix(tag, "_bytes") || tag == "max_body") && n >= 1<<10 {
			if u := binaryUnits(n); u != "" {
				s += " (" + u + ")"
			}
		}
		return s
	case reflect.Float32, reflect.Float64:
		return code(strconv.FormatFloat(v.Float(), 'g', -1, 64))
	case reflect.Slice, reflect.Map:
		if v.Len() == 0 {
			return "empty"
		}
		if v.Kind() == reflect.Slice {
			items := make([]string, v.Len())
			for i := range items {
				items[i] = code(fmt.Sprint(v.Index(i).Interface()))
			}
			return strings.Join(items, ", ")
		}
	}
	return "" // a mapping: its keys have the defaults
}

// binaryUnits writes n as KiB, MiB or GiB when it is a whole number of one.
func binaryUnits(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d %s", n/u.size, u.name)
		}
	}
	return ""
}

// fmtDuration writes d as a configuration writes it: 5m rather than 5m0s.
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// formatConst writes an evaluated constant as a configuration would.
func formatConst(v value) string {
	switch v.v.Kind() {
	case constant.Int:
		n, ok := constant.Int64Val(v.v)
		if !ok {
			return v.v.ExactString()
		}
		if v.duration {
			return fmtDuration(time.Duration(n))
		}
		if n >= 1<<20 {
			if u := binaryUnits(n); u != "" {
				return u
			}
		}
		return strconv.FormatInt(n, 10)
	case constant.String:
		return strconv.Quote(constant.StringVal(v.v))
	}
	return v.v.ExactString()
}

func isExported(name string) bool {
	return name != "" && unicode.IsUpper(rune(name[0]))
}

// enum lists the values the key at path accepts, when they are listed:
// the names of an enum type (its xxxNames table, or its string constants
// declared with the type), an exported []string of
// config named for the struct and field (RLSOnStoreError), a const group
// whose doc says it holds "the values of" the key, or validation's "must
// be a, b or c" for the key.
func (w *walker) enum(parent *typ, f field, path string) []string {
	switch f.typ.kind {
	case kText:
		if vals := stringsOf(f.typ.pkg.vars[lowerFirst(f.typ.name)+"Names"]); vals != nil {
			return vals
		}
		return typedConsts(f.typ)
	case kString:
	default:
		return nil
	}
	if parent.pkg == w.cfg {
		if vals := stringsOf(w.cfg.vars[parent.name+f.goName]); vals != nil {
			return vals
		}
		for _, g := range w.cfg.groups {
			if !strings.Contains(g.doc, "values of") || !mentions(g.doc, f.tag) {
				continue
			}
			var vals []string
			for _, n := range g.names {
				if v, err := w.cfg.constValue(n); err == nil && v.v.Kind() == constant.String {
					vals = append(vals, constant.StringVal(v.v))
				}
			}
			if vals != nil {
				return vals
			}
		}
	}
	return w.mustBe()[path]
}

// typedConsts returns the string constants declared with type t, such as
// StoreMemory StoreKind = "memory", in source order.
func typedConsts(t *typ) []string {
	var vals []string
	for _, g := range t.pkg.groups {
		for _, n := range g.names {
			c, ok := t.pkg.consts[n]
			if !ok {
				continue
			}
			if id, ok := c.typ.(*ast.Ident); !ok || id.Name != t.name {
				continue
			}
			if v, err := t.pkg.constValue(n); err == nil && v.v.Kind() == constant.String {
				vals = append(vals, constant.StringVal(v.v))
			}
		}
	}
	return vals
}

// stringsOf returns the string literals of e, a composite literal such as
// []string{"a", "b"} or [...]string{A: "a", B: "b"}; nil for anything else.
func stringsOf(e ast.Expr) []string {
	lit, ok := e.(*ast.CompositeLit)
	if !ok {
		return nil
	}
	var out []string
	for _, el := range lit.Elts {
		if kv, ok := el.(*ast.KeyValueExpr); ok {
			el = kv.Value
		}
		bl, ok := el.(*ast.BasicLit)
		if !ok {
			return nil
		}
		s, err := strconv.Unquote(bl.Value)
		if err != nil {
			return nil
		}
		out = append(out, s)
	}
	return out
}

func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}

var (
	mustBeRE = regexp.MustCompile(`must be (.+?), got`)
	wordRE   = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
)

// mustBe maps the paths that validation names literally to the values its
// message lists: errs.addf("log.level", "must be debug, info, warn or
// error, got %q", ...) lists the levels.
func (w *walker) mustBe() map[string][]string {
	if w.mustBeCache != nil {
		return w.mustBeCache
	}
	w.mustBeCache = map[string][]string{}
	var fns []*ast.FuncDecl
	for _, f := range w.cfg.funcs {
		fns = append(fns, f)
	}
	for _, ms := range w.cfg.methods {
		for _, m := range ms {
			fns = append(fns, m)
		}
	}
	// In source order, the first message of a path wins, whatever the
	// order of the maps.
	slices.SortFunc(fns, func(a, b *ast.FuncDecl) int { return cmp.Compare(a.Pos(), b.Pos()) })
	for _, fn := range fns {
		if fn.Body == nil {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 2 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "add" && sel.Sel.Name != "addf" {
				return true
			}
			path, ok1 := stringLit(call.Args[0])
			msg, ok2 := stringLit(call.Args[1])
			if !ok1 || !ok2 {
				return true
			}
			if _, seen := w.mustBeCache[path]; !seen {
				if vals := listedValues(msg); vals != nil {
					w.mustBeCache[path] = vals
				}
			}
			return true
		})
	}
	return w.mustBeCache
}

// listedValues returns the words of "must be a, b or c, got": nil unless
// there are two or more, each a plain lowercase word.
func listedValues(msg string) []string {
	m := mustBeRE.FindStringSubmatch(msg)
	if m == nil {
		return nil
	}
	var vals []string
	for part := range strings.SplitSeq(strings.ReplaceAll(m[1], " or ", ", "), ", ") {
		v := strings.Trim(part, `"`)
		if !wordRE.MatchString(v) {
			return nil
		}
		vals = append(vals, v)
	}
	if len(vals) < 2 {
		return nil
	}
	return vals
}

func stringLit(e ast.Expr) (string, bool) {
	bl, ok := e.(*ast.BasicLit)
	if !ok {
		return "", false
	}
	s, err := strconv.Unquote(bl.Value)
	return s, err == nil
}

// rootAt is where the walk starts: at Config, whose value is Default's,
// reached by environment variables.
func rootAt() at {
	return at{env: true, dflt: reflect.ValueOf(config.Default())}
}
