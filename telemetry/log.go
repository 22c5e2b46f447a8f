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
//
// A flat record (see logline.go), the access line among them, is encoded
// by the handler itself, without an allocation, in the bytes
// slog.JSONHandler would write; every other record goes through
// slog.JSONHandler, its durations converted by the handler rather than
// through ReplaceAttr, which would send every attribute, the time, level
// and message included, down slog's slow path. When w is a LogSink or its
// Access writer, each line is handed to it whole; any other w gets one
// Write per line, never two at once.
func NewLogger(w io.Writer, level slog.Level) *slog.Logger {
	out := newLineOut(w)
	base := slog.NewJSONHandler(out.writer(), &slog.HandlerOptions{Level: level})
	return slog.New(&traceHandler{base: base, inner: base, out: out, flat: true})
}

// readable returns a with its value resolved and any duration in it (in
// a group too) as its String form, and whether it changed anything.
func readable(a slog.Attr) (slog.Attr, bool) {
	switch a.Value.Kind() {
	case slog.KindDuration:
		return slog.String(a.Key, a.Value.Duration().String()), true
	case slog.KindLogValuer:
		a.Value = a.Value.Resolve()
		r, _ := readable(a)
		return r, true
	case slog.KindGroup:
		g := a.Value.Group()
		changed := false
		out := make([]slog.Attr, len(g))
		for i, ga := range g {
			var c bool
			out[i], c = readable(ga)
			changed = changed || c
		}
		if changed {
			return slog.Attr{Key: a.Key, Value: slog.GroupValue(out...)}, true
		}
	}
	return a, false
}

// readableAll is attrs through readable, attrs itself when nothing changed.
func readableAll(attrs []slog.Attr) []slog.Attr {
	for i, a := range attrs {
		if _, changed := readable(a); changed {
			out := make([]slog.Attr, len(attrs))
			copy(out, attrs[:i])
			for j := i; j < len(attrs); j++ {
				out[j], _ = readable(attrs[j])
			}
			return out
		}
	}
	return attrs
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
	out    *lineOut
	flat   bool   // whether ops are attributes of simple kinds only
	pre    []byte // when flat, ops' attributes encoded: ,"key":value...
}

func (h *traceHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.flat {
		if ok, err := h.out.handleFlat(ctx, h.pre, r); ok {
			return err
		}
	}
	sc := trace.SpanContextFromContext(ctx)
	convert := false
	r.Attrs(func(a slog.Attr) bool {
		_, convert = readable(a)
		return !convert
	})
	if !sc.IsValid() && !convert {
		return h.inner.Handle(ctx, r)
	}
	if convert { // a record of its own, the converted attributes in it
		nr := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
		r.Attrs(func(a slog.Attr) bool {
			a, _ = readable(a)
			nr.AddAttrs(a)
			return true
		})
		r = nr
	}
	if !sc.IsValid() {
		return h.inner.Handle(ctx, r)
	}
	ids := []slog.Attr{
		slog.String(LogKeyTraceID, sc.TraceID().String()),
		slog.String(LogKeySpanID, sc.SpanID().String()),
	}
	if !h.groups {
		if !convert {
			r = r.Clone()
		}
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
	attrs = readableAll(attrs)
	d := h.derive(handlerOp{attrs: attrs}, h.inner.WithAttrs(attrs))
	if d.flat {
		// A copy: h's encoding stays h's.
		d.pre, d.flat = appendFlatAttrs(h.pre[:len(h.pre):len(h.pre)], attrs)
	}
	return d
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
		out:    h.out,
		flat:   h.flat && op.group == "",
		pre:    h.pre,
	}
}
