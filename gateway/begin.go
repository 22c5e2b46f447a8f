package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/quotagate/quotagate/telemetry"
)

// begin is the outermost stage. It gives the request its state, its request
// id and its server span, bounds its body (size and deadlines, see
// requestBody), and after the inner stages have
// answered it records the request metric and the access log line.
func (g *Gateway) begin(p *pipeline) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			st := &requestState{start: g.opts.Now()}
			st.rec.ResponseWriter = w
			setRequestID(r.Header, w.Header(), st)

			ctx, span := r.Context(), nonRecording
			if g.tracing {
				ctx = g.opts.Propagator.Extract(ctx, telemetry.HeaderCarrier(r.Header))
				ctx, span = g.tracer.Start(ctx, "quotagate.request", serverSpan...)
				if span.IsRecording() {
					span.SetAttributes(attribute.String("http.request.method", r.Method))
				}
			}
			ctx = context.WithValue(ctx, stateKey{}, st)
			r = r.WithContext(ctx)

			if r.Body != nil && r.Body != http.NoBody {
				if r.ContentLength > p.body.max {
					pr, _ := bodyTooLarge.problem(st.requestID, p.body.max)
					writeProblem(&st.rec, pr)
					g.finish(ctx, span, r, st)
					return
				}
				body := newRequestBody(w, r, st, p.body)
				st.rec.body, r.Body = body, body
			}

			next.ServeHTTP(&st.rec, r)
			if st.bodyHeld > 0 {
				g.bodyBudget.Give(st.bodyHeld)
			}
			if f := st.bodyFault.load(); f.timedOut() {
				g.opts.Metrics.BodyTimeout(ctx, f.reason())
			}
			g.finish(ctx, span, r, st)
		})
	}
}

// serverSpan is the start options of every request span, built once (a
// slice passed on as it is, so starting a span that is not sampled
// allocates nothing).
var serverSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}

// nonRecording is a span that records nothing and whose End does nothing.
var nonRecording = trace.SpanFromContext(context.Background())

// startStage starts the span of a pipeline stage as a child of the request
// span, or, when the request span records nothing (tracing off or not
// sampled), returns ctx unchanged and a span that records nothing: with a
// parent-based sampler the child would not be recorded either, and this
// spares a context and a span per stage.
func (g *Gateway) startStage(ctx context.Context, name string) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, nonRecording
	}
	return g.tracer.Start(ctx, name)
}

// finish records what the request came to.
func (g *Gateway) finish(ctx context.Context, span trace.Span, r *http.Request, st *requestState) {
	status := st.rec.status
	if status == 0 {
		status = http.StatusOK
	}
	routeName := "unmatched"
	if st.route != nil {
		routeName = st.route.name
	}
	if span.IsRecording() {
		span.SetAttributes(telemetry.AttrRoute.String(routeName), attribute.Int("http.response.status_code", status))
		if st.caller.ID != "" {
			span.SetAttributes(telemetry.AttrCaller.String(st.caller.ID))
		}
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
	}
	span.End()
	if g.opts.Metrics != nil {
		g.opts.Metrics.Request(ctx, routeName, status)
	}
	lvl := slog.LevelInfo
	if status == http.StatusTooManyRequests {
		lvl = slog.LevelDebug
	}
	access := g.opts.AccessLog
	if access == nil {
		access = g.opts.Logger
	}
	h := access.Handler()
	if !h.Enabled(ctx, lvl) {
		return
	}
	// Denials can come in floods; at debug, one in 100 is logged. The
	// shared counter is only touched when that line could be written.
	if lvl == slog.LevelDebug && g.denials.Add(1)%100 != 1 {
		return
	}
	// The record goes to the handler directly, as slog.Logger would hand
	// it on but without the caller's program counter, which the line does
	// not show and whose runtime.Callers is a tenth of what writing it
	// costs. Its attributes are all of simple kinds, so the handler
	// encodes it without an allocation (telemetry.NewLogger).
	end := g.opts.Now()
	rec := slog.NewRecord(end, lvl, "request", 0)
	rec.AddAttrs(
		slog.String("request_id", st.requestID),
		slog.String("method", r.Method),
		slog.String("route", routeName),
		slog.Int("status", status),
		slog.String("caller", st.caller.ID),
		slog.Int64("bytes", st.rec.written),
		slog.Duration("duration", end.Sub(st.start)),
	)
	if st.route != nil && st.route.upstreamName != "" && status != http.StatusTooManyRequests {
		rec.AddAttrs(slog.String("upstream", st.route.upstreamName))
	}
	_ = h.Handle(ctx, rec)
}

// setRequestID gives the request its id (see requestID) and sets it as the
// X-Request-Id of the response and of the request, for the upstream. A
// kept id, sent once, is already in the request and its slice is reused
// for the response; a new id's two slices share st's array (capacity one
// each, so a later Add copies rather than overwriting the other).
func setRequestID(req, resp http.Header, st *requestState) {
	ids := req["X-Request-Id"]
	in := ""
	if len(ids) > 0 {
		in = ids[0]
	}
	st.requestID = requestID(in)
	if st.requestID == in && len(ids) == 1 {
		resp["X-Request-Id"] = ids[0:1:1]
		return
	}
	vals := &st.hdr.requestID
	vals[0], vals[1] = st.requestID, st.requestID
	req["X-Request-Id"] = vals[0:1:1]
	resp["X-Request-Id"] = vals[1:2:2]
}

// requestID keeps a caller's X-Request-ID when it is short and made of safe
// characters, and otherwise makes a new one.
func requestID(in string) string {
	if n := len(in); n > 0 && n <= 128 {
		ok := true
		for i := 0; i < n; i++ {
			c := in[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
				ok = false
				break
			}
		}
		if ok {
			return in
		}
	}
	return newRequestID()
}

var (
	idPrefix  = randomHex(6)
	idCounter atomic.Uint64
)

// newRequestID returns a process-unique id: a random per-process prefix and
// a counter, so that generating one costs no system call.
func newRequestID() string {
	var buf [12 + 1 + 16]byte
	copy(buf[:], idPrefix)
	buf[12] = '-'
	n := idCounter.Add(1)
	const hexdigits = "0123456789abcdef"
	for i := 28; i >= 13; i-- {
		buf[i] = hexdigits[n&0xf]
		n >>= 4
	}
	return string(buf[:])
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
