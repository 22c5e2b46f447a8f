package telemetry

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// oracleLogger is slog.JSONHandler with durations as their String form:
// what NewLogger's lines are documented to be.
func oracleLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Value.Kind() == slog.KindDuration {
				return slog.String(a.Key, a.Value.Duration().String())
			}
			return a
		}}))
}

var flatLineTime = time.Date(2026, 12, 3, 18, 4, 5, 123456789, time.UTC)

// flatLineCases are records NewLogger encodes itself (flat: true) and
// records it hands to slog.JSONHandler (flat: false).
var flatLineCases = []struct {
	name  string
	msg   string
	attrs []slog.Attr
	flat  bool
}{
	{"no attrs", "request", nil, true},
	{"access line", "request", []slog.Attr{
		slog.String("request_id", "01JEX5"), slog.String("method", "GET"), slog.String("route", "echo"),
		slog.Int("status", 200), slog.String("caller", ""), slog.Int64("bytes", 11),
		slog.Duration("duration", 1234567*time.Nanosecond)}, true},
	{"quotes and backslashes", `say "hi" \ bye`, []slog.Attr{slog.String(`k"\`, `v"\"`)}, true},
	{"control bytes", "a\nb\rc\td", []slog.Attr{slog.String("ctl", "\x00\x01\x07\x1b\x1f\x7f")}, true},
	{"html as it is", "<a href='x'>&amp;</a>", nil, true},
	{"invalid UTF-8", "\xff\xfe ok \xc3", []slog.Attr{slog.String("bad", "a\xe2\x82b\xed\xa0\x80")}, true},
	{"line and paragraph separators", "x\u2028y\u2029z", []slog.Attr{slog.String("s", "\u2028")}, true},
	{"multi-byte UTF-8", "µs ✓ 😀", []slog.Attr{slog.String("日本", "語")}, true},
	{"empty key and value", "", []slog.Attr{slog.String("", ""), slog.Int("", 0)}, true},
	{"numbers", "n", []slog.Attr{slog.Int64("neg", -42), slog.Int64("min", math.MinInt64),
		slog.Uint64("max", math.MaxUint64), slog.Int("zero", 0), slog.Bool("t", true), slog.Bool("f", false)}, true},
	{"floats", "f", []slog.Attr{slog.Float64("a", 0.1), slog.Float64("b", -2.5), slog.Float64("c", 1e21),
		slog.Float64("d", 1e20), slog.Float64("e", 1e-7), slog.Float64("f", 1e-6), slog.Float64("g", math.Copysign(0, -1)),
		slog.Float64("h", 5e-324), slog.Float64("i", math.MaxFloat64), slog.Float64("j", 123456789.125)}, true},
	{"durations", "d", []slog.Attr{slog.Duration("zero", 0), slog.Duration("ns", 999), slog.Duration("us", 1500),
		slog.Duration("ms", 250*time.Millisecond), slog.Duration("neg", -1500*time.Millisecond),
		slog.Duration("h", 90*time.Minute+3*time.Second+5), slog.Duration("min", math.MinInt64),
		slog.Duration("max", math.MaxInt64), slog.Duration("m", 2*time.Minute)}, true},
	{"times", "t", []slog.Attr{slog.Time("utc", flatLineTime),
		slog.Time("zone", flatLineTime.In(time.FixedZone("X", -(3*3600+30*60)))),
		slog.Time("whole", time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)), slog.Time("zero", time.Time{})}, true},
	{"any of a simple kind", "any", []slog.Attr{slog.Any("s", "x"), slog.Any("i", 3), slog.Any("d", time.Second)}, true},
	{"empty group", "g", []slog.Attr{slog.Group("empty"), slog.String("after", "x")}, true}, // AddAttrs leaves it out
	{"group of empty groups", "g", []slog.Attr{slog.Group("outer", slog.Group("inner"), slog.Int("x", 1)), slog.Int("after", 1)}, false},
	{"group", "g", []slog.Attr{slog.Group("g", slog.Int("a", 1), slog.Duration("d", time.Second))}, false},
	{"inline group", "g", []slog.Attr{slog.Group("", slog.Int("a", 1))}, false},
	{"any", "any", []slog.Attr{slog.Any("err", io.EOF), slog.Any("list", []int{1, 2})}, false},
	{"NaN", "f", []slog.Attr{slog.Float64("nan", math.NaN())}, false},
	{"infinity", "f", []slog.Attr{slog.Float64("inf", math.Inf(-1))}, false},
	{"year out of range", "t", []slog.Attr{slog.Time("t", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))}, false},
	{"empty attr", "e", []slog.Attr{{}, slog.Int("a", 1)}, false},
}

// TestFlatLineMatchesJSONHandler: for every record, flat or not, at every
// level, NewLogger writes the bytes slog.JSONHandler writes (durations as
// their String form), those of a logger's With attributes included; the
// flat ones are encoded by NewLogger's own encoder.
func TestFlatLineMatchesJSONHandler(t *testing.T) {
	with := []slog.Attr{slog.String("component", "store \"redis\""), slog.Duration("timeout", 250*time.Millisecond)}
	for _, c := range flatLineCases {
		for _, lvl := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn + 2} {
			for _, tm := range []time.Time{flatLineTime, {}} {
				r := slog.NewRecord(tm, lvl, c.msg, 0)
				r.AddAttrs(c.attrs...)
				if _, ok := appendFlatLine(nil, nil, r, trace.SpanContext{}); ok != c.flat {
					t.Errorf("%s: flat %v, want %v", c.name, ok, c.flat)
				}
				for _, w := range [][]slog.Attr{nil, with} {
					var got, want bytes.Buffer
					l, o := NewLogger(&got, slog.LevelDebug), oracleLogger(&want)
					if w != nil {
						l, o = l.With(attrsAny(w)...), o.With(attrsAny(w)...)
					}
					_ = l.Handler().Handle(context.Background(), r)
					_ = o.Handler().Handle(context.Background(), r)
					if got.String() != want.String() {
						t.Errorf("%s (level %v, time %v, with %d):\n got %q\nwant %q", c.name, lvl, !tm.IsZero(), len(w), got.String(), want.String())
					}
				}
			}
		}
	}
}

func attrsAny(attrs []slog.Attr) []any {
	out := make([]any, len(attrs))
	for i, a := range attrs {
		out[i] = a
	}
	return out
}

// TestFlatLineTraceIDs: a flat record logged in a span ends with the
// span's trace_id and span_id, as the JSON handler's path writes them.
func TestFlatLineTraceIDs(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	r := slog.NewRecord(flatLineTime, slog.LevelInfo, "request", 0)
	r.AddAttrs(slog.String("route", "echo"), slog.Duration("duration", time.Millisecond))
	var got, want bytes.Buffer
	_ = NewLogger(&got, slog.LevelInfo).Handler().Handle(ctx, r)
	r.AddAttrs(slog.String(LogKeyTraceID, sc.TraceID().String()), slog.String(LogKeySpanID, sc.SpanID().String()))
	_ = oracleLogger(&want).Handler().Handle(ctx, r)
	if got.String() != want.String() {
		t.Errorf("got  %q\nwant %q", got.String(), want.String())
	}
	if !strings.HasSuffix(got.String(), `"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7"}`+"\n") {
		t.Errorf("ids not last: %s", got.String())
	}
}

// TestAppendDuration: appendDuration writes what Duration.String does,
// across every unit boundary and over random magnitudes.
func TestAppendDuration(t *testing.T) {
	ds := []time.Duration{0, 1, -1, 999, 1000, 1001, 999999, 1000000, 1000001, 1500000, 999999999,
		time.Second, time.Second + 1, 59 * time.Second, time.Minute, time.Hour, 100 * time.Hour,
		time.Hour + time.Nanosecond, math.MaxInt64, math.MinInt64, math.MinInt64 + 1}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		d := time.Duration(rng.Int64() >> rng.IntN(63))
		ds = append(ds, d, -d)
	}
	for _, d := range ds {
		if got := string(appendDuration(nil, d)); got != d.String() {
			t.Fatalf("appendDuration(%d) = %q, want %q", int64(d), got, d.String())
		}
	}
}

// TestFlatLineAllocatesNothing: a flat record, the access line's kinds,
// in a span or not, reaches a LogSink's access writer without an
// allocation.
func TestFlatLineAllocatesNothing(t *testing.T) {
	sink := NewLogSink(io.Discard, 0)
	defer func() { _ = sink.Close() }()
	h := NewLogger(sink.Access(), slog.LevelInfo).Handler()
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}})
	for _, ctx := range []context.Context{context.Background(), trace.ContextWithSpanContext(context.Background(), sc)} {
		n := testing.AllocsPerRun(1000, func() {
			r := slog.NewRecord(flatLineTime, slog.LevelInfo, "request", 0)
			r.AddAttrs(slog.String("request_id", "01JEX5"), slog.String("route", "echo"),
				slog.Int("status", 200), slog.Int64("bytes", 11), slog.Duration("duration", 1500*time.Microsecond))
			if err := h.Handle(ctx, r); err != nil {
				t.Fatal(err)
			}
		})
		if n != 0 {
			t.Errorf("%v allocations per flat line, want 0", n)
		}
	}
	if d := sink.Drops(); d.Access != 0 {
		t.Errorf("%d access lines dropped", d.Access)
	}
}
