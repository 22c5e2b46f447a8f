package usage

import (
	"errors"
	"testing"
)

// TestExpr: expressions evaluate as integer arithmetic that saturates at
// MaxUnits, "/" rounds up, fields and prices are numbered in order of
// first use, and a syntax error names its position.
func TestExpr(t *testing.T) {
	cases := []struct {
		src            string
		fields, prices []uint64
		want           uint64
	}{
		{"usage.prompt_tokens + usage.completion_tokens", []uint64{30, 12}, nil, 42},
		{"2 * a + 3*b", []uint64{5, 7}, nil, 31},
		{"(a + b) * 2", []uint64{5, 7}, nil, 24},
		{"a * price(model).input + b * price(model).output", []uint64{1000, 10}, []uint64{2500, 10000}, 2_600_000},
		{"(a * price(model).input) / 1000", []uint64{3}, []uint64{150}, 1}, // 0.45 rounds up
		{"a / 1000", []uint64{2000}, nil, 2},
		{"a * b", []uint64{1 << 40, 1 << 40}, nil, MaxUnits},
		{"a + a", []uint64{MaxUnits}, nil, MaxUnits},
		{"a", []uint64{MaxUnits + 5}, nil, MaxUnits},
		{"7", nil, nil, 7},
	}
	for _, c := range cases {
		e, err := ParseExpr(c.src)
		if err != nil {
			t.Fatalf("%q: %v", c.src, err)
		}
		if got := e.Eval(c.fields, c.prices); got != c.want {
			t.Errorf("%q = %d, want %d", c.src, got, c.want)
		}
		if n := testing.AllocsPerRun(100, func() { e.Eval(c.fields, c.prices) }); n != 0 {
			t.Errorf("%q: %v allocations per Eval", c.src, n)
		}
	}
	if e, _ := ParseExpr("a.b + c + a.b * price(m).x + price(m).x"); len(e.Fields) != 2 || e.Fields[1] != "c" || len(e.Prices) != 1 {
		t.Errorf("fields %v prices %v, want [a.b c] and one price", e.Fields, e.Prices)
	}
	bad := []struct{ src, want string }{
		{"", "at 0: empty expression"},
		{"a +", "at 3: expected a number, a field, price(...) or \"(\""},
		{"a - b", "at 2: unexpected \"-\""},
		{"a / 0", "at 4: \"/\" divides by a whole number >= 1"},
		{"a / b", "at 4: \"/\" divides by a whole number >= 1"},
		{"(a + b", "at 6: expected \")\""},
		{"a..b", "at 2: expected a name after \".\""},
		{"price(model)", "at 12: expected \".\" and a price field after price(model)"},
		{"price()", "at 6: expected price(<dimension>).<field>"},
		{"99999999999999999999", "at 0: a number above 2^53"},
	}
	for _, c := range bad {
		_, err := ParseExpr(c.src)
		var ee *ExprError
		if !errors.As(err, &ee) || err.Error() != c.want {
			t.Errorf("ParseExpr(%q) = %v, want %s", c.src, err, c.want)
		}
	}
	deep := "a"
	for range MaxExprDepth {
		deep = "(a + " + deep + ")"
	}
	if _, err := ParseExpr(deep); err == nil {
		t.Error("an expression deeper than MaxExprDepth was accepted")
	}
}
