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
		{"a - b", []uint64{7, 5}, nil, 2},
		{"a - b", []uint64{5, 7}, nil, 0},                          // max(a - b, 0)
		{"a - b - c", []uint64{5, 7, 1}, nil, 0},                   // 0 at the first, then 0 - 1 is 0
		{"a - b + c", []uint64{5, 7, 4}, nil, 4},                   // (0) + 4: each subtraction stops at 0
		{"a - (b - c)", []uint64{5, 7, 4}, nil, 2},                 // 5 - 3
		{"a + b - c", []uint64{MaxUnits, 5, 5}, nil, MaxUnits - 5}, // the sum saturates first
		{"a - b * 2", []uint64{10, 3}, nil, 4},                     // "*" binds tighter
		{"(a - b) / 3", []uint64{10, 3}, nil, 3},                   // 7 / 3 rounds up
		{"a - 0", []uint64{MaxUnits}, nil, MaxUnits},
		// The uncached prompt at the input price, the cached at the cached
		// price: 800 × 2500 + 200 × 1250 nano-USD.
		{"(usage.prompt_tokens - usage.prompt_tokens_details.cached_tokens) * price(model).input + usage.prompt_tokens_details.cached_tokens * price(model).cached",
			[]uint64{1000, 200}, []uint64{2500, 1250}, 2_250_000},
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
		{"-a", "at 0: no unary minus: \"-\" subtracts a term from the one before it, and a value is never negative"},
		{"a - -b", "at 4: no unary minus: \"-\" subtracts a term from the one before it, and a value is never negative"},
		{"a * (-b)", "at 5: no unary minus: \"-\" subtracts a term from the one before it, and a value is never negative"},
		{"a -", "at 3: expected a number, a field, price(...) or \"(\""},
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
	for _, c := range []struct {
		src string
		ok  bool
		at  int
	}{{"a + b * 2 / 3", true, -1}, {"a + (b - c)", false, 7}, {"a-b - c", false, 1}} {
		e, err := ParseExpr(c.src)
		if err != nil {
			t.Fatalf("%q: %v", c.src, err)
		}
		if ok, at := e.Monotone(); ok != c.ok || at != c.at {
			t.Errorf("%q: Monotone() = %v, %d, want %v, %d", c.src, ok, at, c.ok, c.at)
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

// FuzzExpr: any text either compiles or is an *ExprError at an offset
// within it; a compiled expression evaluates within [0, MaxUnits] for any
// field and price values, and one that Monotone says is monotone never
// decreases when a field grows.
func FuzzExpr(f *testing.F) {
	for _, s := range []string{
		"usage.prompt_tokens + usage.completion_tokens",
		"(usage.prompt_tokens - usage.prompt_tokens_details.cached_tokens) * price(model).input + usage.prompt_tokens_details.cached_tokens * price(model).cached",
		"(a * price(m).input + b * price(m).output) / 1000",
		"a - b - c", "a - (b - c) * 2", "-a", "a - -b", "a * b / 3 + 7",
	} {
		f.Add(s, uint64(1000), uint64(200), uint64(3))
	}
	f.Fuzz(func(t *testing.T, src string, a, b, grow uint64) {
		e, err := ParseExpr(src)
		if err != nil {
			var ee *ExprError
			if !errors.As(err, &ee) || ee.Pos < 0 || ee.Pos > len(src) {
				t.Fatalf("ParseExpr(%q) = %v: not an *ExprError within the text", src, err)
			}
			return
		}
		fields := make([]uint64, len(e.Fields))
		prices := make([]uint64, len(e.Prices))
		for i := range fields {
			fields[i] = min(a>>(i%64), MaxUnits)
		}
		for i := range prices {
			prices[i] = b >> (i % 64)
		}
		v := e.Eval(fields, prices)
		if v > MaxUnits {
			t.Fatalf("%q = %d, above MaxUnits", src, v)
		}
		if ok, _ := e.Monotone(); ok && len(fields) > 0 {
			i := int(grow % uint64(len(fields)))
			fields[i] = min(fields[i]+grow%MaxUnits, MaxUnits)
			if w := e.Eval(fields, prices); w < v {
				t.Fatalf("%q is monotone, but field %s growing took it from %d to %d", src, e.Fields[i], v, w)
			}
		}
	})
}
