package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/quotagate/quotagate/internal/syncbuf"
)

// slogLine is the line NewLogger writes for l at lvl and t: the form the
// access log must keep.
func slogLine(t testing.TB, sc trace.SpanContext, lvl slog.Level, at time.Time, l *AccessLine) []byte {
	t.Helper()
	var buf bytes.Buffer
	h := NewLogger(&buf, slog.LevelDebug).Handler()
	r := slog.NewRecord(at, lvl, "request", 0)
	r.AddAttrs(
		slog.String("request_id", l.RequestID),
		slog.String("method", l.Method),
		slog.String("route", l.Route),
		slog.Int("status", l.Status),
		slog.String("caller", l.Caller),
		slog.Int64("bytes", l.Bytes),
		slog.Duration("duration", l.Duration),
	)
	ctx := context.Background()
	if sc.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, sc)
	}
	if err := h.Handle(ctx, r); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func testSpanContext() trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
}

func TestAccessLineMatchesSlog(t *testing.T) {
	at := time.Date(2026, 11, 30, 23, 10, 16, 123456789, time.FixedZone("x", 3600+1800))
	l := &AccessLine{RequestID: "r-1", Method: "GET", Route: "items.get", Status: 200,
		Caller: "tenant:acme", Bytes: 1234, Duration: 1500 * time.Microsecond}
	for _, sc := range []trace.SpanContext{{}, testSpanContext()} {
		for _, lvl := range []slog.Level{slog.LevelInfo, slog.LevelDebug, slog.LevelWarn + 1} {
			got := AppendAccessLine(nil, sc, lvl, at, l)
			if want := slogLine(t, sc, lvl, at, l); !bytes.Equal(got, want) {
				t.Errorf("level %v, span %v:\n got %s\nwant %s", lvl, sc.IsValid(), got, want)
			}
		}
	}
	at = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if got, want := AppendAccessLine(nil, trace.SpanContext{}, slog.LevelInfo, at, l), slogLine(t, trace.SpanContext{}, slog.LevelInfo, at, l); !bytes.Equal(got, want) {
		t.Errorf("whole second:\n got %s\nwant %s", got, want)
	}
}

func TestAppendDurationMatchesString(t *testing.T) {
	for _, d := range []time.Duration{0, 1, 999, 1000, 1001, 1500, 999999, 1e6, 1500000, 999999999, 1e9,
		1e9 + 1, 59e9, 60e9, 61e9 + 5e8, 3600e9, 3661e9 + 1, math.MaxInt64, math.MinInt64, -1, -1500, -61e9} {
		if got, want := string(AppendDuration(nil, d)), d.String(); got != want {
			t.Errorf("AppendDuration(%d) = %q, want %q", int64(d), got, want)
		}
	}
}

func FuzzAppendDuration(f *testing.F) {
	f.Add(int64(1500))
	f.Add(int64(-3661000000001))
	f.Fuzz(func(t *testing.T, n int64) {
		if got, want := string(AppendDuration(nil, time.Duration(n))), time.Duration(n).String(); got != want {
			t.Errorf("AppendDuration(%d) = %q, want %q", n, got, want)
		}
	})
}

// FuzzAccessLine: whatever the strings (control bytes, quotes, invalid
// UTF-8, U+2028), the line is one line of valid JSON whose fields hold the
// values given (invalid UTF-8 read back as U+FFFD, as encoding/json does),
// and it is byte for byte what slog writes.
func FuzzAccessLine(f *testing.F) {
	f.Add("r-1", "GET", "items.get", "tenant:acme", 200, int64(12), int64(1500))
	f.Add("\"\\\n\r\t\x00\x1f<>&", "PO\u2028ST", "\u2029é", "\xff\xfe bad", 429, int64(-1), int64(-5))
	f.Fuzz(func(t *testing.T, id, method, route, caller string, status int, n, d int64) {
		l := &AccessLine{RequestID: id, Method: method, Route: route, Status: status, Caller: caller,
			Bytes: n, Duration: time.Duration(d)}
		at := time.Unix(1700000000, 123456789).UTC()
		got := AppendAccessLine(nil, trace.SpanContext{}, slog.LevelInfo, at, l)
		if bytes.IndexByte(got, '\n') != len(got)-1 {
			t.Fatalf("not one line: %q", got)
		}
		var v struct {
			Time, Level, Msg, Method, Route, Caller, Duration string
			RequestID                                         string `json:"request_id"`
			Status                                            int
			Bytes                                             int64
		}
		dec := json.NewDecoder(bytes.NewReader(got))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("not JSON: %v\n%q", err, got)
		}
		// Each invalid byte reads back as one U+FFFD, as ranging over a
		// string decodes it.
		perByte := func(s string) string {
			var sb strings.Builder
			for _, r := range s {
				sb.WriteRune(r)
			}
			return sb.String()
		}
		if v.RequestID != perByte(id) || v.Method != perByte(method) || v.Route != perByte(route) ||
			v.Caller != perByte(caller) || v.Status != status || v.Bytes != n ||
			v.Duration != time.Duration(d).String() || v.Msg != "request" || v.Level != "INFO" {
			t.Errorf("fields changed: %+v from %+v", v, l)
		}
		if want := slogLine(t, trace.SpanContext{}, slog.LevelInfo, at, l); !bytes.Equal(got, want) {
			t.Errorf("differs from slog:\n got %q\nwant %q", got, want)
		}
	})
}

func TestAccessLogLevel(t *testing.T) {
	var buf syncbuf.Buffer
	w := NewAsyncWriter(&buf, 16)
	a := NewAccessLog(w, slog.LevelInfo)
	l := &AccessLine{RequestID: "a", Method: "GET", Route: "r", Status: 429}
	a.Log(context.Background(), slog.LevelDebug, time.Now(), l)
	l.RequestID = "b"
	a.Log(trace.ContextWithSpanContext(context.Background(), testSpanContext()), slog.LevelInfo, time.Now(), l)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if strings.Count(out, "\n") != 1 || !strings.Contains(out, `"request_id":"b"`) ||
		!strings.Contains(out, `"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7"}`) {
		t.Errorf("want only the info line, with trace ids; got %s", out)
	}
	var nilLog *AccessLog
	if nilLog.Enabled(slog.LevelError) {
		t.Error("a nil AccessLog is enabled")
	}
}

// blockingWriter holds every Write until release is closed, and says when
// the first Write has started.
type blockingWriter struct {
	started chan struct{}
	once    sync.Once
	release chan struct{}
	out     syncbuf.Buffer
}

func (b *blockingWriter) Write(p []byte) (int, error) {
	b.once.Do(func() { close(b.started) })
	<-b.release
	return b.out.Write(p)
}

func TestAsyncWriterDropsAndCountsWhenBlocked(t *testing.T) {
	bw := &blockingWriter{started: make(chan struct{}), release: make(chan struct{})}
	const queue = 4
	w := NewAsyncWriter(bw, queue)
	if !w.TryWrite([]byte("first\n")) {
		t.Fatal("first line dropped")
	}
	<-bw.started // the writer goroutine holds "first" and is stuck in Write
	// The queue takes exactly queue more lines; the rest are dropped at
	// once, never blocking this goroutine.
	kept := 0
	for i := range queue + 10 {
		if w.TryWrite([]byte("line " + string(rune('a'+i)) + "\n")) {
			kept++
		}
	}
	if kept != queue || w.Dropped() != 10 {
		t.Errorf("kept %d, dropped %d; want %d and 10", kept, w.Dropped(), queue)
	}
	close(bw.release)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	want := "first\nline a\nline b\nline c\nline d\n"
	if got := bw.out.String(); got != want {
		t.Errorf("written %q, want %q", got, want)
	}
}

func TestAsyncWriterFlushesOnClose(t *testing.T) {
	var buf syncbuf.Buffer
	w := NewAsyncWriter(&buf, 0)
	var want strings.Builder
	for i := range 1000 {
		line := strings.Repeat("x", i%300) + "\n"
		want.WriteString(line)
		if !w.TryWrite([]byte(line)) {
			t.Fatalf("line %d dropped", i)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); got != want.String() {
		t.Errorf("after Close: %d bytes written, want %d in order", len(got), want.Len())
	}
	if w.Close() == nil {
		t.Error("second Close did not fail")
	}
	// After Close, lines are written directly.
	w.TryWrite([]byte("late\n"))
	_, _ = w.Write([]byte("later\n"))
	if got := buf.String(); !strings.HasSuffix(got, "late\nlater\n") {
		t.Errorf("lines after Close not written: %q", got[max(0, len(got)-20):])
	}
	if w.Dropped() != 0 {
		t.Errorf("dropped %d with the default queue", w.Dropped())
	}
}

// TestAsyncWriterWriteIsSynchronous: Write (operational lines) is on the
// destination when it returns, and never dropped.
func TestAsyncWriterWriteIsSynchronous(t *testing.T) {
	var buf syncbuf.Buffer
	w := NewAsyncWriter(&buf, 1)
	defer w.Close()
	for i := range 100 {
		line := "op " + strconv.Itoa(i) + "\n"
		if n, err := w.Write([]byte(line)); n != len(line) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
		if !strings.HasSuffix(buf.String(), line) {
			t.Fatalf("line %d not written when Write returned", i)
		}
	}
	if w.Dropped() != 0 {
		t.Errorf("dropped %d", w.Dropped())
	}
}

func TestLogDropsMetric(t *testing.T) {
	m, p := newTestMetrics(t)
	var n uint64 = 7
	if err := m.ObserveLogDrops(func() LogDrops { return LogDrops{Access: n} }); err != nil {
		t.Fatal(err)
	}
	// Replacing the function replaces the value, not adds to it.
	if err := m.ObserveLogDrops(func() LogDrops { return LogDrops{Access: n + 1, Operational: 2} }); err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, p.Metrics)
	f := fams["quotagate_log_lines_dropped_total"]
	if f == nil || len(f.Metric) != 2 {
		t.Fatalf("quotagate_log_lines_dropped_total = %v, want 2 series", f)
	}
	got := map[string]float64{}
	for _, s := range f.Metric {
		for _, l := range s.GetLabel() {
			if l.GetName() == "kind" {
				got[l.GetValue()] = s.GetCounter().GetValue()
			}
		}
	}
	if got["access"] != 8 || got["operational"] != 2 || len(got) != 2 {
		t.Errorf("quotagate_log_lines_dropped_total by kind = %v, want access 8, operational 2", got)
	}
}

func BenchmarkAccessLog(b *testing.B) {
	w := NewAsyncWriter(io.Discard, 0)
	defer w.Close()
	a := NewAccessLog(w, slog.LevelInfo)
	l := &AccessLine{RequestID: "0f2a6c1e9b7d4e3a", Method: "POST", Route: "transfers.create", Status: 200,
		Caller: "tenant:t0", Bytes: 512, Duration: 1234567}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		a.Log(ctx, slog.LevelInfo, time.Now(), l)
	}
}
