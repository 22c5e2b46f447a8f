package usage

import (
	"fmt"
	"strconv"
)

// Expr is an integer expression over the usage fields of a response, such
// as "usage.prompt_tokens + usage.completion_tokens", compiled once into a
// slice of operations and evaluated without allocating.
//
// Grammar (spaces are ignored):
//
//	expr   = term { ("+" | "-") term }
//	term   = factor { "*" factor | "/" number }
//	factor = number | field | "price(" name ")." name | "(" expr ")"
//	field  = name { "." name }       a JSON path, as Source.JSON
//	name   = [A-Za-z_][A-Za-z0-9_]*
//	number = [0-9]+                  at most MaxUnits
//
// Arithmetic is on non-negative integers and saturates at MaxUnits: a sum
// or product past it is MaxUnits, never a wrapped value. "a - b" is
// max(a - b, 0), taken at each subtraction (so "a - b - c" is 0 whenever
// b alone exceeds a, and "a - b + c" is c then); "+" and "-" group from
// the left, "*" and "/" bind tighter. There is no unary minus: a value
// is never negative. "/" divides by a constant >= 1 and rounds up (a
// part of a unit is charged as a unit). price(d).f is a value the caller
// supplies per request (see Eval), such as the price of a token of the
// request's model.
//
// Without "-" an expression is monotone: it never decreases when a field
// or price grows, so its value on upper bounds of its fields is an upper
// bound of its value (see Monotone).
type Expr struct {
	ops []exprOp
	// Fields are the distinct field paths the expression reads, in the
	// order Eval takes their values.
	Fields []string
	// Prices are the distinct price(d).f references, in the order Eval
	// takes their values.
	Prices []PriceRef
	depth  int
	// sub is the byte offset of the first "-"; -1 for none.
	sub int
}

// Monotone reports whether e never decreases when one of its fields or
// prices grows: true unless it subtracts. at is then the byte offset of
// its first "-" (-1 when it has none).
func (e *Expr) Monotone() (ok bool, at int) { return e.sub < 0, e.sub }

// PriceRef is a price(Dimension).Field reference of an expression.
type PriceRef struct{ Dimension, Field string }

// MaxExprDepth bounds the values an expression holds at once while it is
// evaluated (its nesting), and so the stack Eval keeps on its own.
const MaxExprDepth = 16

type exprOp struct {
	code uint8
	n    uint64 // the constant, or the index of a field or price
}

const (
	opConst uint8 = iota
	opField
	opPrice
	opAdd
	opSub
	opMul
	opDiv
)

// ExprError is a syntax error of an expression: the problem, at byte
// offset Pos (0-based) of the text.
type ExprError struct {
	Pos     int
	Problem string
}

func (e *ExprError) Error() string { return fmt.Sprintf("at %d: %s", e.Pos, e.Problem) }

// ParseExpr compiles s, or returns an *ExprError.
func ParseExpr(s string) (*Expr, error) {
	p := &exprParser{s: s, e: &Expr{sub: -1}}
	if p.space(); p.i == len(s) {
		return nil, &ExprError{Pos: 0, Problem: "empty expression"}
	}
	p.expr()
	p.space()
	if p.err == nil && p.i < len(p.s) {
		p.fail("unexpected " + strconv.Quote(p.s[p.i:p.i+1]))
	}
	if p.err != nil {
		return nil, p.err
	}
	return p.e, nil
}

type exprParser struct {
	s     string
	i     int
	e     *Expr
	err   *ExprError
	stack int // values on the stack after the ops so far
}

func (p *exprParser) fail(problem string) {
	if p.err == nil {
		p.err = &ExprError{Pos: p.i, Problem: problem}
	}
}

func (p *exprParser) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n') {
		p.i++
	}
}

func (p *exprParser) emit(code uint8, n uint64) {
	p.e.ops = append(p.e.ops, exprOp{code, n})
	if code <= opPrice {
		p.stack++
		if p.stack > MaxExprDepth {
			p.fail(fmt.Sprintf("nested deeper than %d values", MaxExprDepth))
		}
		p.e.depth = max(p.e.depth, p.stack)
	} else {
		p.stack--
	}
}

func (p *exprParser) peek(c byte) bool {
	p.space()
	return p.i < len(p.s) && p.s[p.i] == c
}

func (p *exprParser) expr() {
	p.term()
	for p.err == nil {
		code := opAdd
		switch {
		case p.peek('+'):
		case p.peek('-'):
			code = opSub
			if p.e.sub < 0 {
				p.e.sub = p.i
			}
		default:
			return
		}
		p.i++
		p.term()
		p.emit(code, 0)
	}
}

func (p *exprParser) term() {
	p.factor()
	for p.err == nil {
		switch {
		case p.peek('*'):
			p.i++
			p.factor()
			p.emit(opMul, 0)
		case p.peek('/'):
			p.i++
			p.space()
			at := p.i
			n, ok := p.number()
			if !ok || n == 0 {
				p.i = at
				p.fail("\"/\" divides by a whole number >= 1")
				return
			}
			p.e.ops = append(p.e.ops, exprOp{opDiv, n})
		default:
			return
		}
	}
}

// number reads digits; ok is false when there are none.
func (p *exprParser) number() (uint64, bool) {
	start := p.i
	for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
	}
	if p.i == start {
		return 0, false
	}
	n, ok := parseUnits(p.s[start:p.i])
	if !ok {
		p.i = start
		p.fail("a number above 2^53")
	}
	return n, true
}

func (p *exprParser) name() string {
	start := p.i
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || p.i > start && c >= '0' && c <= '9' {
			p.i++
			continue
		}
		break
	}
	return p.s[start:p.i]
}

func (p *exprParser) factor() {
	p.space()
	if p.i >= len(p.s) {
		p.fail("expected a number, a field, price(...) or \"(\"")
		return
	}
	switch c := p.s[p.i]; {
	case c == '-':
		p.fail("no unary minus: \"-\" subtracts a term from the one before it, and a value is never negative")
	case c >= '0' && c <= '9':
		n, _ := p.number()
		p.emit(opConst, n)
	case c == '(':
		p.i++
		p.expr()
		if p.err == nil && !p.peek(')') {
			p.fail("expected \")\"")
			return
		}
		p.i++
	default:
		start := p.i
		first := p.name()
		if first == "" {
			p.fail("expected a number, a field, price(...) or \"(\"")
			return
		}
		if first == "price" && p.peek('(') {
			p.price()
			return
		}
		for p.i < len(p.s) && p.s[p.i] == '.' {
			p.i++
			if p.name() == "" {
				p.fail("expected a name after \".\"")
				return
			}
		}
		field := p.s[start:p.i]
		if _, err := parsePath(field); err != nil {
			p.i = start
			p.fail(err.Error())
			return
		}
		p.emit(opField, uint64(index(&p.e.Fields, field)))
	}
}

// price reads "(d).f" after "price".
func (p *exprParser) price() {
	p.i++ // (
	p.space()
	dim := p.name()
	if dim == "" || !p.peek(')') {
		p.fail("expected price(<dimension>).<field>")
		return
	}
	p.i++
	if p.i >= len(p.s) || p.s[p.i] != '.' {
		p.fail("expected \".\" and a price field after price(" + dim + ")")
		return
	}
	p.i++
	field := p.name()
	if field == "" {
		p.fail("expected a price field after price(" + dim + ").")
		return
	}
	ref := PriceRef{dim, field}
	i := len(p.e.Prices)
	for j, r := range p.e.Prices {
		if r == ref {
			i = j
		}
	}
	if i == len(p.e.Prices) {
		p.e.Prices = append(p.e.Prices, ref)
	}
	p.emit(opPrice, uint64(i))
}

// index returns the index of s in *list, appending it when absent.
func index(list *[]string, s string) int {
	for i, v := range *list {
		if v == s {
			return i
		}
	}
	*list = append(*list, s)
	return len(*list) - 1
}

// Eval returns the value of e for the values of its Fields and Prices,
// in their order (a missing value is the caller's to decide; Eval takes
// what it is given). It saturates at MaxUnits, stops each subtraction at
// 0, and allocates nothing.
func (e *Expr) Eval(fields, prices []uint64) uint64 {
	var stack [MaxExprDepth]uint64
	n := 0
	for _, op := range e.ops {
		switch op.code {
		case opConst:
			stack[n] = op.n
			n++
		case opField:
			stack[n] = min(fields[op.n], MaxUnits)
			n++
		case opPrice:
			stack[n] = min(prices[op.n], MaxUnits)
			n++
		case opAdd:
			n--
			stack[n-1] = min(stack[n-1]+stack[n], MaxUnits) // each <= 2^53: no wrap
		case opSub:
			n--
			stack[n-1] -= min(stack[n-1], stack[n]) // max(a - b, 0): never below 0
		case opMul:
			n--
			stack[n-1] = mulUnits(stack[n-1], stack[n])
		case opDiv:
			v := stack[n-1]
			stack[n-1] = v/op.n + min(v%op.n, 1)
		}
	}
	return stack[0]
}
