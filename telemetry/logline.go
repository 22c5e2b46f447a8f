package telemetry

import (
	"context"
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"
)

// This file is NewLogger's encoding of a flat record: a record whose
// attributes, those of the logger's With included, are all of a simple
// kind (string, int64, uint64, bool, duration, time, float64) outside any
// group. Such a record, the access line among them, is encoded by the
// handler itself into a buffer on the stack and handed whole to the
// logger's destination, without an allocation; its bytes are the ones
// slog.JSONHandler writes for it, durations as their String form
// (TestFlatLineMatchesJSONHandler). Every other record goes through
// slog.JSONHandler.

// lineOut is where the handlers derived from one NewLogger write whole
// lines: into a LogSink without a lock of its own (the sink is safe for
// concurrent use and copies the line), into any other writer one line at
// a time under mu, which slog.JSONHandler's writes take too (through
// lockedWriter), so the two ways of encoding never interleave.
type lineOut struct {
	sink   *LogSink // operational lines of a sink, or nil
	access *LogSink // access lines of a sink, or nil
	w      io.Writer
	mu     sync.Mutex
	pool   sync.Pool // *[]byte, for w
}

func newLineOut(w io.Writer) *lineOut {
	o := &lineOut{w: w}
	switch d := w.(type) {
	case *LogSink:
		o.sink = d
	case accessWriter:
		o.access = d.s
	}
	return o
}

// writer is the destination slog.JSONHandler writes to.
func (o *lineOut) writer() io.Writer {
	if o.sink != nil || o.access != nil {
		return o.w
	}
	return lockedWriter{o}
}

// write hands line, one whole line, to the destination; line is not kept.
func (o *lineOut) write(line []byte) error {
	var err error
	switch {
	case o.access != nil:
		_, err = accessWriter{o.access}.Write(line)
	case o.sink != nil:
		_, err = o.sink.Write(line)
	default:
		// A copy, so that line, on its caller's stack, does not escape
		// into an interface call.
		bp, _ := o.pool.Get().(*[]byte)
		if bp == nil {
			bp = new([]byte)
		}
		*bp = append((*bp)[:0], line...)
		o.mu.Lock()
		_, err = o.w.Write(*bp)
		o.mu.Unlock()
		if cap(*bp) <= 16<<10 {
			o.pool.Put(bp)
		}
	}
	return err
}

type lockedWriter struct{ o *lineOut }

func (l lockedWriter) Write(p []byte) (int, error) {
	l.o.mu.Lock()
	defer l.o.mu.Unlock()
	return l.o.w.Write(p)
}

// lineBuffer is the room on the stack a flat line is encoded in; a longer
// line grows onto the heap.
const lineBuffer = 512

// handleFlat writes r as one line when it is flat (pre holds the logger's
// With attributes, encoded), and reports whether it was.
func (o *lineOut) handleFlat(ctx context.Context, pre []byte, r slog.Record) (bool, error) {
	var arr [lineBuffer]byte
	b, ok := appendFlatLine(arr[:0], pre, r, trace.SpanContextFromContext(ctx))
	if !ok {
		return false, nil
	}
	return true, o.write(b)
}

// appendFlatLine appends r as slog.JSONHandler encodes it, with pre after
// the message and the span's ids last, or reports that r is not flat.
func appendFlatLine(b, pre []byte, r slog.Record, sc trace.SpanContext) ([]byte, bool) {
	b = append(b, '{')
	if !r.Time.IsZero() {
		var ok bool
		b = append(b, `"time":`...)
		if b, ok = appendJSONTime(b, r.Time); !ok {
			return b, false
		}
		b = append(b, ',')
	}
	switch r.Level {
	case slog.LevelInfo:
		b = append(b, `"level":"INFO","msg":`...)
	case slog.LevelDebug:
		b = append(b, `"level":"DEBUG","msg":`...)
	default:
		b = append(b, `"level":`...)
		b = appendJSONString(b, r.Level.String())
		b = append(b, `,"msg":`...)
	}
	b = appendJSONString(b, r.Message)
	b = append(b, pre...)
	flat := true
	r.Attrs(func(a slog.Attr) bool {
		b, flat = appendFlatAttr(b, a)
		return flat
	})
	if !flat {
		return b, false
	}
	if sc.IsValid() {
		tid, sid := sc.TraceID(), sc.SpanID()
		b = append(b, `,"`+LogKeyTraceID+`":"`...)
		b = appendHex(b, tid[:])
		b = append(b, `","`+LogKeySpanID+`":"`...)
		b = appendHex(b, sid[:])
		b = append(b, '"')
	}
	return append(b, "}\n"...), true
}

// appendFlatAttrs is appendFlatAttr for each of attrs.
func appendFlatAttrs(b []byte, attrs []slog.Attr) ([]byte, bool) {
	for _, a := range attrs {
		var ok bool
		if b, ok = appendFlatAttr(b, a); !ok {
			return b, false
		}
	}
	return b, true
}

// appendFlatAttr appends ,"key":value for a of a simple kind, or reports
// that it is not.
func appendFlatAttr(b []byte, a slog.Attr) ([]byte, bool) {
	v := a.Value
	k := v.Kind()
	switch k {
	case slog.KindString, slog.KindInt64, slog.KindUint64, slog.KindBool,
		slog.KindDuration, slog.KindTime, slog.KindFloat64:
	default:
		return b, false
	}
	b = append(b, ',')
	b = appendJSONString(b, a.Key)
	b = append(b, ':')
	switch k {
	case slog.KindString:
		return appendJSONString(b, v.String()), true
	case slog.KindInt64:
		return strconv.AppendInt(b, v.Int64(), 10), true
	case slog.KindUint64:
		return strconv.AppendUint(b, v.Uint64(), 10), true
	case slog.KindBool:
		return strconv.AppendBool(b, v.Bool()), true
	case slog.KindDuration:
		b = append(b, '"')
		b = appendDuration(b, v.Duration())
		return append(b, '"'), true
	case slog.KindTime:
		return appendJSONTime(b, v.Time())
	default:
		return appendJSONFloat(b, v.Float64())
	}
}

// appendJSONTime appends t in RFC 3339 with nanoseconds, quoted, or
// reports a year slog would write an error for.
func appendJSONTime(b []byte, t time.Time) ([]byte, bool) {
	if y := t.Year(); y < 0 || y >= 10000 {
		return b, false
	}
	b = append(b, '"')
	b = appendRFC3339Nano(b, t)
	return append(b, '"'), true
}

// appendJSONFloat appends f as encoding/json writes a float64 (the
// shortest form that reads back as f, in exponent form below 1e-6 and from
// 1e21, the exponent without a leading zero), or reports NaN and the
// infinities, which JSON has no form for.
func appendJSONFloat(b []byte, f float64) ([]byte, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return b, false
	}
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		b = strconv.AppendFloat(b, f, 'e', -1, 64)
		// e-07 is written e-7: drop the exponent's leading zero.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
		return b, true
	}
	return strconv.AppendFloat(b, f, 'f', -1, 64), true
}

const hexDigits = "0123456789abcdef"

// appendHex appends p in lower-case hex.
func appendHex(b, p []byte) []byte {
	for _, c := range p {
		b = append(b, hexDigits[c>>4], hexDigits[c&0xf])
	}
	return b
}

// appendJSONString appends s as a JSON string the way log/slog's JSON
// handler writes it: '"' and '\\' escaped, \n \r \t as such, other bytes
// below 0x20 and U+2028/U+2029 as \u escapes, invalid UTF-8 as U+FFFD;
// '<', '>' and '&' are left as they are.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	i := 0
	for i < len(s) && jsonPlain[s[i]] { // the common string is all plain
		i++
	}
	start := 0 // s[start:i] is yet to be appended unchanged
	for i < len(s) {
		c := s[i]
		if jsonPlain[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// jsonPlain marks the bytes appendJSONString copies as they are: printable
// ASCII and DEL, less '"' and '\\'. One table lookup per byte is the whole
// cost of the common string (ids, methods, route names).
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// appendDuration appends d as d.String() writes it ("1h2m3.5s", "1.5ms",
// "250µs", "0s"), without building a string.
func appendDuration(b []byte, d time.Duration) []byte {
	if d == 0 {
		return append(b, "0s"...)
	}
	u := uint64(d)
	if d < 0 {
		b = append(b, '-')
		u = -u // the magnitude, right for math.MinInt64 too
	}
	switch {
	case u < uint64(time.Microsecond):
		b = strconv.AppendUint(b, u, 10)
		return append(b, "ns"...)
	case u < uint64(time.Millisecond):
		return append(appendDecimal(b, u, 3), "µs"...)
	case u < uint64(time.Second):
		return append(appendDecimal(b, u, 6), "ms"...)
	}
	secs := u / uint64(time.Second)
	if h := secs / 3600; h > 0 {
		b = strconv.AppendUint(b, h, 10)
		b = append(b, 'h')
	}
	if secs >= 60 {
		b = strconv.AppendUint(b, secs/60%60, 10)
		b = append(b, 'm')
	}
	return append(appendDecimal(b, secs%60*uint64(time.Second)+u%uint64(time.Second), 9), 's')
}

// appendDecimal appends u / 10^digits with its fraction, trailing zeros
// and a fraction of zero left out ("1.5", "2").
func appendDecimal(b []byte, u uint64, digits int) []byte {
	pow := uint64(1)
	for range digits {
		pow *= 10
	}
	b = strconv.AppendUint(b, u/pow, 10)
	frac := u % pow
	if frac == 0 {
		return b
	}
	for frac%10 == 0 {
		frac /= 10
		digits--
	}
	b = append(b, '.')
	for n := countDigits(frac); n < digits; n++ {
		b = append(b, '0')
	}
	return strconv.AppendUint(b, frac, 10)
}

// countDigits is the number of decimal digits of u > 0.
func countDigits(u uint64) int {
	n := 0
	for ; u > 0; u /= 10 {
		n++
	}
	return n
}
