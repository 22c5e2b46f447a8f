package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func decodeLines(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func TestLoggerTraceIDs(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ctx, span := tp.Tracer("t").Start(context.Background(), "req")
	defer span.End()
	sc := span.SpanContext()

	var buf bytes.Buffer
	log := NewLogger(&buf, slog.LevelInfo)
	log.InfoContext(ctx, "with span", "k", 1)
	log.InfoContext(context.Background(), "without span")
	log.DebugContext(ctx, "below level")
	log.With("component", "store").WithGroup("redis").InfoContext(ctx, "grouped", "addr", "a:1")

	lines := decodeLines(t, &buf)
	if len(lines) != 3 {
		t.Fatalf("got %d lines, want 3: %s", len(lines), buf.String())
	}
	if lines[0][LogKeyTraceID] != sc.TraceID().String() || lines[0][LogKeySpanID] != sc.SpanID().String() {
		t.Errorf("line 0 ids = %v/%v, want %s/%s", lines[0][LogKeyTraceID], lines[0][LogKeySpanID], sc.TraceID(), sc.SpanID())
	}
	if lines[0]["msg"] != "with span" || lines[0]["k"] != float64(1) {
		t.Errorf("line 0 = %v", lines[0])
	}
	if _, ok := lines[1][LogKeyTraceID]; ok {
		t.Errorf("trace_id without a span: %v", lines[1])
	}
	g := lines[2]
	if g[LogKeyTraceID] != sc.TraceID().String() || g["component"] != "store" {
		t.Errorf("grouped line lacks top-level trace_id/component: %v", g)
	}
	redis, _ := g["redis"].(map[string]any)
	if redis["addr"] != "a:1" {
		t.Errorf("group content = %v", g["redis"])
	}
	if _, ok := redis[LogKeyTraceID]; ok {
		t.Errorf("trace_id inside group: %v", g)
	}
}

func TestParseLevel(t *testing.T) {
	good := map[string]slog.Level{
		"debug": slog.LevelDebug, "INFO": slog.LevelInfo, " warn ": slog.LevelWarn,
		"Warning": slog.LevelWarn, "error": slog.LevelError, "info+2": slog.LevelInfo + 2,
	}
	for s, want := range good {
		got, err := ParseLevel(s)
		if err != nil || got != want {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "verbose", "3", "info+"} {
		if _, err := ParseLevel(s); err == nil {
			t.Errorf("ParseLevel(%q) succeeded", s)
		}
	}
}

// TestLoggerWritesReadableDurations: an operator reads "10s", not
// 10000000000, in every place a duration can be logged.
func TestLoggerWritesReadableDurations(t *testing.T) {
	var buf bytes.Buffer
	log := NewLogger(&buf, slog.LevelInfo)
	log.Info("shutting down", slog.Duration("drain_timeout", 10*time.Second))
	log.With(slog.Duration("grace", 1500*time.Millisecond)).WithGroup("g").
		Info("grouped", slog.Duration("took", 250*time.Microsecond), "any", 3*time.Minute)
	lines := decodeLines(t, &buf)
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2: %s", len(lines), buf.String())
	}
	if got := lines[0]["drain_timeout"]; got != "10s" {
		t.Errorf("drain_timeout = %#v, want \"10s\"", got)
	}
	if got := lines[1]["grace"]; got != "1.5s" {
		t.Errorf("grace = %#v, want \"1.5s\"", got)
	}
	g, _ := lines[1]["g"].(map[string]any)
	if got := g["took"]; got != "250µs" {
		t.Errorf("g.took = %#v, want \"250µs\"", got)
	}
	if got := g["any"]; got != "3m0s" {
		t.Errorf("g.any = %#v, want \"3m0s\"", got)
	}

	buf.Reset()
	log.Info("nested", slog.Group("redis", slog.Duration("timeout", 250*time.Millisecond)), "later", laterValuer{})
	lines = decodeLines(t, &buf)
	if r, _ := lines[0]["redis"].(map[string]any); r["timeout"] != "250ms" || lines[0]["later"] != "2s" {
		t.Errorf("a group's duration and a LogValuer's: %s, want \"250ms\" and \"2s\"", buf.String())
	}
}

// laterValuer logs as a duration.
type laterValuer struct{}

func (laterValuer) LogValue() slog.Value { return slog.DurationValue(2 * time.Second) }
