package main

import (
	"errors"
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// pkg is one parsed package of the module: its declarations, by name.
type pkg struct {
	path    string // import path
	dir     string
	name    string
	doc     string                              // the package doc comment
	types   map[string]*decl                    // type declarations
	consts  map[string]*cnst                    // const declarations
	vars    map[string]ast.Expr                 // package-level var values
	groups  []constGroup                        // const declarations with their doc
	methods map[string]map[string]*ast.FuncDecl // receiver type → method name → decl
	funcs   map[string]*ast.FuncDecl            // plain functions
	imports map[string]string                   // local name → import path, over all files
	src     *source
}

// decl is a type declaration and its doc comment.
type decl struct {
	name string
	doc  string
	spec *ast.TypeSpec
}

// cnst is a constant: its expression and the type written, if any.
type cnst struct {
	name string
	expr ast.Expr
	typ  ast.Expr
}

// constGroup is one const declaration: its doc and the names it declares.
type constGroup struct {
	doc   string
	names []string
}

// source loads the packages of one module from their files.
type source struct {
	fset   *token.FileSet
	module string // module path
	root   string // module root directory
	pkgs   map[string]*pkg
}

// newSource returns a source for the module holding dir.
func newSource(dir string) (*source, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	for d := abs; ; d = filepath.Dir(d) {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil {
			mod := modulePath(b)
			if mod == "" {
				return nil, fmt.Errorf("%s: no module line", filepath.Join(d, "go.mod"))
			}
			return &source{fset: token.NewFileSet(), module: mod, root: d, pkgs: map[string]*pkg{}}, nil
		}
		if filepath.Dir(d) == d {
			return nil, fmt.Errorf("no go.mod above %s", abs)
		}
	}
}

func modulePath(gomod []byte) string {
	for line := range strings.SplitSeq(string(gomod), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// load parses the package at import path p, which must be of the module.
func (s *source) load(p string) (*pkg, error) {
	if pk, ok := s.pkgs[p]; ok {
		return pk, nil
	}
	rel, ok := strings.CutPrefix(p, s.module)
	if !ok || rel != "" && rel[0] != '/' {
		return nil, fmt.Errorf("package %s is not in module %s", p, s.module)
	}
	dir := filepath.Join(s.root, filepath.FromSlash(strings.TrimPrefix(rel, "/")))
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	pk := &pkg{path: p, dir: dir, types: map[string]*decl{}, consts: map[string]*cnst{}, vars: map[string]ast.Expr{},
		methods: map[string]map[string]*ast.FuncDecl{}, funcs: map[string]*ast.FuncDecl{}, imports: map[string]string{}, src: s}
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(s.fset, filepath.Join(dir, n), nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		pk.add(f)
	}
	if pk.name == "" {
		return nil, fmt.Errorf("%s: no Go files", dir)
	}
	s.pkgs[p] = pk
	return pk, nil
}

// add records the declarations of one file.
func (pk *pkg) add(f *ast.File) {
	pk.name = f.Name.Name
	if f.Doc != nil && pk.doc == "" {
		pk.doc = f.Doc.Text()
	}
	for _, im := range f.Imports {
		path, _ := strconv.Unquote(im.Path.Value)
		local := path[strings.LastIndex(path, "/")+1:]
		if im.Name != nil {
			local = im.Name.Name
		}
		pk.imports[local] = path
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				pk.funcs[d.Name.Name] = d
				continue
			}
			recv := receiverName(d.Recv.List[0].Type)
			if pk.methods[recv] == nil {
				pk.methods[recv] = map[string]*ast.FuncDecl{}
			}
			pk.methods[recv][d.Name.Name] = d
		case *ast.GenDecl:
			pk.addGen(d)
		}
	}
}

func (pk *pkg) addGen(d *ast.GenDecl) {
	switch d.Tok {
	case token.TYPE:
		for _, sp := range d.Specs {
			ts := sp.(*ast.TypeSpec)
			doc := ts.Doc.Text()
			if doc == "" && len(d.Specs) == 1 {
				doc = d.Doc.Text()
			}
			pk.types[ts.Name.Name] = &decl{name: ts.Name.Name, doc: doc, spec: ts}
		}
	case token.CONST:
		g := constGroup{doc: d.Doc.Text()}
		for _, sp := range d.Specs {
			vs := sp.(*ast.ValueSpec)
			for i, n := range vs.Names {
				g.names = append(g.names, n.Name)
				if i < len(vs.Values) {
					pk.consts[n.Name] = &cnst{name: n.Name, expr: vs.Values[i], typ: vs.Type}
				}
			}
		}
		pk.groups = append(pk.groups, g)
	case token.VAR:
		for _, sp := range d.Specs {
			vs := sp.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if i < len(vs.Values) {
					pk.vars[n.Name] = vs.Values[i]
				}
			}
		}
	}
}

func receiverName(e ast.Expr) string {
	if st, ok := e.(*ast.StarExpr); ok {
		e = st.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// imported loads the package that the local name refers to in pk, or
// returns nil when it is not of the module (such as time).
func (pk *pkg) imported(local string) *pkg {
	p, ok := pk.imports[local]
	if !ok || !strings.HasPrefix(p, pk.src.module) {
		return nil
	}
	other, err := pk.src.load(p)
	if err != nil {
		return nil
	}
	return other
}

// value is an evaluated constant: its value and whether its type is
// time.Duration.
type value struct {
	v        constant.Value
	duration bool
}

var errNotConst = errors.New("not a constant expression")

// timeUnits are the constants of package time that config constants use.
var timeUnits = map[string]int64{
	"Nanosecond": 1, "Microsecond": 1e3, "Millisecond": 1e6, "Second": 1e9, "Minute": 60e9, "Hour": 3600e9,
}

// constValue evaluates the constant name of pk.
func (pk *pkg) constValue(name string) (value, error) {
	return pk.constValueSeen(name, map[string]bool{})
}

func (pk *pkg) constValueSeen(name string, seen map[string]bool) (value, error) {
	c, ok := pk.consts[name]
	if !ok || seen[name] {
		return value{}, errNotConst
	}
	seen[name] = true
	v, err := pk.eval(c.expr, seen)
	if err != nil {
		return value{}, err
	}
	if sel, ok := c.typ.(*ast.SelectorExpr); ok && sel.Sel.Name == "Duration" {
		v.duration = true
	}
	return v, nil
}

// eval evaluates the constant expressions config's constants are written
// with: literals, other constants, time units, arithmetic and conversions.
func (pk *pkg) eval(e ast.Expr, seen map[string]bool) (value, error) {
	switch e := e.(type) {
	case *ast.BasicLit:
		v := constant.MakeFromLiteral(e.Value, e.Kind, 0)
		if v.Kind() == constant.Unknown {
			return value{}, errNotConst
		}
		return value{v: v}, nil
	case *ast.ParenExpr:
		return pk.eval(e.X, seen)
	case *ast.Ident:
		switch e.Name {
		case "true", "false":
			return value{v: constant.MakeBool(e.Name == "true")}, nil
		}
		return pk.constValueSeen(e.Name, seen)
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok && x.Name == "time" {
			if n, ok := timeUnits[e.Sel.Name]; ok {
				return value{v: constant.MakeInt64(n), duration: true}, nil
			}
		}
		return value{}, errNotConst
	case *ast.UnaryExpr:
		x, err := pk.eval(e.X, seen)
		if err != nil {
			return value{}, err
		}
		return value{v: constant.UnaryOp(e.Op, x.v, 0), duration: x.duration}, nil
	case *ast.BinaryExpr:
		x, err := pk.eval(e.X, seen)
		if err != nil {
			return value{}, err
		}
		y, err := pk.eval(e.Y, seen)
		if err != nil {
			return value{}, err
		}
		return binary(e.Op, x, y)
	case *ast.CallExpr:
		// A conversion, such as int64(n) or time.Duration(n).
		if len(e.Args) != 1 {
			return value{}, errNotConst
		}
		v, err := pk.eval(e.Args[0], seen)
		if err != nil {
			return value{}, err
		}
		if sel, ok := e.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Duration" {
			v.duration = true
		}
		return v, nil
	}
	return value{}, errNotConst
}

func binary(op token.Token, x, y value) (value, error) {
	d := x.duration || y.duration
	switch op {
	case token.SHL, token.SHR:
		n, ok := constant.Uint64Val(y.v)
		if !ok {
			return value{}, errNotConst
		}
		return value{v: constant.Shift(x.v, op, uint(n)), duration: x.duration}, nil
	case token.QUO:
		if x.v.Kind() == constant.Int && y.v.Kind() == constant.Int {
			op = token.QUO_ASSIGN // integer division
		}
	case token.ADD, token.SUB, token.MUL, token.REM, token.AND, token.OR:
	default:
		return value{}, errNotConst
	}
	return value{v: constant.BinaryOp(x.v, op, y.v), duration: d}, nil
}
