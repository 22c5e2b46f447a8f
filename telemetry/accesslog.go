package telemetry

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"
)

// AccessLine is what one access log line says about an answered request.
type AccessLine struct {
	RequestID string
	Method    string
	Route     string
	Status    int
	Caller    string        // "" when the caller was not identified
	Bytes     int64         // response body bytes written
	Duration  time.Duration // from arrival to the end of the answer
}

// AccessLog writes access lines in exactly the JSON form NewLogger gives a
// record with message "request" and the AccessLine's fields as attributes
// (time as RFC 3339 with nanoseconds, trailing zeros dropped, level, msg, request_id, method, route,
// status, caller, bytes, duration as a Go duration string, then trace_id
// and span_id when the context carries a valid span context), but encodes
// them by hand into a pooled buffer, without reflection or a slog.Record,
// and hands them to an AsyncWriter that drops rather than blocks.
// Safe for concurrent use.
type AccessLog struct {
	w     *AsyncWriter
	level slog.Leveler
}

// NewAccessLog returns an access log writing lines at or above level to w.
func NewAccessLog(w *AsyncWriter, level slog.Leveler) *AccessLog {
	return &AccessLog{w: w, level: level}
}

// Enabled reports whether a line at lvl would be written.
func (a *AccessLog) Enabled(lvl slog.Level) bool {
	return a != nil && lvl >= a.level.Level()
}

// Dropped is the number of lines dropped because the writer's queue was
// full; 0 for a nil AccessLog.
func (a *AccessLog) Dropped() uint64 {
	if a == nil {
		return 0
	}
	return a.w.Dropped()
}

// Drops is the number of lines lost by the log's writer, by kind
// (AsyncWriter.Drops); zero for a nil AccessLog.
func (a *AccessLog) Drops() LogDrops {
	if a == nil {
		return LogDrops{}
	}
	return a.w.Drops()
}

// accessBufs recycles encoding buffers; a line is typically 250–350 bytes.
var accessBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// Log writes one line for l at level lvl, timestamped t, unless lvl is
// below the log's level. It reports false when the line was dropped
// because the writer's queue was full.
func (a *AccessLog) Log(ctx context.Context, lvl slog.Level, t time.Time, l *AccessLine) bool {
	if !a.Enabled(lvl) {
		return true
	}
	bp := accessBufs.Get().(*[]byte)
	b := AppendAccessLine((*bp)[:0], trace.SpanContextFromContext(ctx), lvl, t, l)
	ok := a.w.TryWrite(b)
	*bp = b
	accessBufs.Put(bp)
	return ok
}

// AppendAccessLine appends l's line, newline included, to b: the encoding
// AccessLog.Log writes. sc adds trace_id and span_id when valid.
func AppendAccessLine(b []byte, sc trace.SpanContext, lvl slog.Level, t time.Time, l *AccessLine) []byte {
	b = append(b, `{"time":"`...)
	b = appendRFC3339Nano(b, t)
	b = append(b, `","level":`...)
	if lvl == slog.LevelInfo {
		b = append(b, `"INFO"`...)
	} else if lvl == slog.LevelDebug {
		b = append(b, `"DEBUG"`...)
	} else {
		b = appendJSONString(b, lvl.String())
	}
	b = append(b, `,"msg":"request","request_id":`...)
	b = appendJSONString(b, l.RequestID)
	b = append(b, `,"method":`...)
	b = appendJSONString(b, l.Method)
	b = append(b, `,"route":`...)
	b = appendJSONString(b, l.Route)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(l.Status), 10)
	b = append(b, `,"caller":`...)
	b = appendJSONString(b, l.Caller)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, l.Bytes, 10)
	b = append(b, `,"duration":"`...)
	b = AppendDuration(b, l.Duration)
	b = append(b, '"')
	if sc.IsValid() {
		tid, sid := sc.TraceID(), sc.SpanID()
		b = append(b, `,"`+LogKeyTraceID+`":"`...)
		b = appendHex(b, tid[:])
		b = append(b, `","`+LogKeySpanID+`":"`...)
		b = appendHex(b, sid[:])
		b = append(b, '"')
	}
	return append(b, "}\n"...)
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

// AppendDuration appends d as time.Duration.String writes it ("1.5ms",
// "2h0m0s", "0s"), without allocating.
func AppendDuration(b []byte, d time.Duration) []byte {
	// Build right to left in a fixed buffer, as the largest value
	// ("-2562047h47m16.854775808s") fits in 32 bytes.
	var buf [32]byte
	w := len(buf)
	u := uint64(d)
	neg := d < 0
	if neg {
		u = -u
	}
	if u < uint64(time.Second) {
		// Under a second: one unit (ns, µs, ms) with a fraction.
		var prec int
		w--
		buf[w] = 's'
		w--
		switch {
		case u == 0:
			return append(b, "0s"...)
		case u < uint64(time.Microsecond):
			prec = 0
			buf[w] = 'n'
		case u < uint64(time.Millisecond):
			prec = 3
			// U+00B5 'µ' micro sign, two bytes in UTF-8.
			w--
			copy(buf[w:], "µ")
		default:
			prec = 6
			buf[w] = 'm'
		}
		w, u = fmtFrac(buf[:w], u, prec)
		w = fmtInt(buf[:w], u)
	} else {
		w--
		buf[w] = 's'
		w, u = fmtFrac(buf[:w], u, 9)
		// u is now whole seconds.
		w = fmtInt(buf[:w], u%60)
		u /= 60
		if u > 0 {
			w--
			buf[w] = 'm'
			w = fmtInt(buf[:w], u%60)
			u /= 60
			if u > 0 {
				w--
				buf[w] = 'h'
				w = fmtInt(buf[:w], u)
			}
		}
	}
	if neg {
		w--
		buf[w] = '-'
	}
	return append(b, buf[w:]...)
}

// fmtFrac writes the fraction of v/10^prec into the end of buf, without
// trailing zeros and without the point when the fraction is zero, and
// returns where it starts and v/10^prec.
func fmtFrac(buf []byte, v uint64, prec int) (int, uint64) {
	w := len(buf)
	printed := false
	for range prec {
		digit := v % 10
		printed = printed || digit != 0
		if printed {
			w--
			buf[w] = byte(digit) + '0'
		}
		v /= 10
	}
	if printed {
		w--
		buf[w] = '.'
	}
	return w, v
}

// fmtInt writes v in decimal into the end of buf and returns where it
// starts.
func fmtInt(buf []byte, v uint64) int {
	w := len(buf)
	if v == 0 {
		w--
		buf[w] = '0'
		return w
	}
	for v > 0 {
		w--
		buf[w] = byte(v%10) + '0'
		v /= 10
	}
	return w
}
