package telemetry

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// Log attribute keys added from the active span.
const (
	LogKeyTraceID = "trace_id"
	LogKeySpanID  = "span_id"
)

// NewLogger returns a logger writing one JSON object per line to w, dropping
// records below level. When the context passed to a logging call
// (InfoContext, ErrorContext, ...) carries a valid span context, the record
// gets top-level "trace_id" and "span_id" fields (hex), also inside loggers
// derived with WithGroup. Durations are written as Go duration strings
// ("10s", "1.5ms"), never as integer nanoseconds.
func NewLogger(w io.Writer, level slog.Level) *slog.Logger {
	base := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: readableDuration})
	return slog.New(&traceHandler{base: base, inner: base})
}

// readableDuration renders a duration attribute as its String form.
func readableDuration(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// ParseLevel parses a log level name: "debug", "info", "warn" (or "warning"),
// "error", in any case, optionally with an offset as slog writes it
// ("info+2"). Anything else, including the empty string, is an error.
func ParseLevel(s string) (slog.Level, error) {
	t := strings.TrimSpace(s)
	if strings.EqualFold(t, "warning") {
		return slog.LevelWarn, nil
	}
	var l slog.Level
	if t == "" {
		return l, fmt.Errorf("telemetry: empty log level; want debug, info, warn or error")
	}
	if err := l.UnmarshalText([]byte(t)); err != nil {
		return l, fmt.Errorf("telemetry: log level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// handlerOp is one WithAttrs or WithGroup call, kept so that trace fields can
// be placed before any group is opened.
type handlerOp struct {
	group string
	attrs []slog.Attr
}

// traceHandler adds trace_id and span_id from the record's context.
type traceHandler struct {
	base   slog.Handler // the JSON handler without derived attributes or groups
	inner  slog.Handler // base with ops applied
	ops    []handlerOp
	groups bool // whether ops contain a group
}

func (h *traceHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *traceHandler) Handle(ctx context.Context, r slog.Record) error {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return h.inner.Handle(ctx, r)
	}
	ids := []slog.Attr{
		slog.String(LogKeyTraceID, sc.TraceID().String()),
		slog.String(LogKeySpanID, sc.SpanID().String()),
	}
	if !h.groups {
		r = r.Clone()
		r.AddAttrs(ids...)
		return h.inner.Handle(ctx, r)
	}
	// A group is open: attributes added to the record would land inside it.
	// Rebuild the handler chain with the ids ahead of the groups.
	hh := h.base.WithAttrs(ids)
	for _, op := range h.ops {
		if op.group != "" {
			hh = hh.WithGroup(op.group)
		} else {
			hh = hh.WithAttrs(op.attrs)
		}
	}
	return hh.Handle(ctx, r)
}

func (h *traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	return h.derive(handlerOp{attrs: attrs}, h.inner.WithAttrs(attrs))
}

func (h *traceHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return h.derive(handlerOp{group: name}, h.inner.WithGroup(name))
}

func (h *traceHandler) derive(op handlerOp, inner slog.Handler) *traceHandler {
	ops := make([]handlerOp, len(h.ops), len(h.ops)+1)
	copy(ops, h.ops)
	return &traceHandler{
		base:   h.base,
		inner:  inner,
		ops:    append(ops, op),
		groups: h.groups || op.group != "",
	}
}
