package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/internal/headername"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/telemetry"
	"github.com/quotagate/quotagate/usage"
)

// measure is a measure of a route (config.Measure; a cost block is the
// measure "cost"), compiled.
type measure struct {
	name         string
	reserve, max int64
	// reserveFrom is where a request states its reservation; asks reports
	// whether there is such a source.
	reserveFrom usage.RequestSource
	asks        bool
	// fields are where a response reports the usage fields the measure
	// settles to: the one of settle_from, or one per field of its settle
	// expression (read from a JSON body or an SSE stream); settles
	// reports whether there are any (otherwise nothing is settled).
	fields  []usage.Source
	settles bool
	// expr, when not nil, computes the used units from the fields'
	// values; nil means the one field's value. prices holds, per index of
	// the route's dimension values (the shared bucket last), the values
	// of expr.Prices.
	expr     *usage.Expr
	prices   [][]uint64
	perToken int64 // reserve_from.prompt_bytes_per_token; 0 for none
	// bound, when >= 0, is the index of the measure on whose token bounds
	// this one reserves its expr's value (reserve_from.measure; -1 for
	// none); boundFields says, per field of expr, which bound it takes.
	bound       int
	boundFields []tokenBound
	maxBody     int64
	// missingMax: a request whose usage goes unreported (see
	// unreported) takes max (on_missing_usage: max), not its reservation.
	missingMax bool
}

// compileMeasures returns the compiled measures of rc, ordered by name,
// and the index of the one stage 1 takes (a cost block's), -1 for none.
// values are the values of the route's dimension (see priceValues).
func compileMeasures(cfg *config.Config, rc config.Route, values []string) (ms []*measure, local int, err error) {
	local = -1
	for _, name := range slices.Sorted(maps.Keys(rc.Measures)) {
		m := rc.Measures[name]
		cm := &measure{name: name, reserve: m.Reserve, max: m.Max, maxBody: m.MaxBody, missingMax: m.OnMissingUsage == config.MissingUsageMax, bound: -1}
		if f := m.ReserveFrom; f != nil && f.Measure == "" {
			cm.reserveFrom, cm.asks = usage.RequestSource{JSON: f.JSON, JSONAliases: f.JSONAliases, JSONCount: f.JSONCount, Header: f.Header}, true
			cm.perToken = f.PromptBytesPerToken
		}
		if f := m.SettleFrom; f != nil {
			cm.fields, cm.settles = []usage.Source{{Header: f.Header, JSON: f.JSON, SSE: f.SSE}}, true
		}
		if cm.expr = m.SettleExpr(); cm.expr != nil {
			for _, f := range cm.expr.Fields {
				cm.fields = append(cm.fields, usage.Source{JSON: f, SSE: f})
			}
			cm.settles = len(cm.fields) > 0
			if cm.prices, err = priceValues(cfg, cm.expr, values); err != nil {
				return nil, 0, fmt.Errorf("measures.%s.settle: %w", name, err)
			}
		}
		if rc.Settle != nil && name == "cost" {
			local = len(ms)
		}
		ms = append(ms, cm)
	}
	for _, cm := range ms { // names resolved once every measure has its index
		if f := rc.Measures[cm.name].ReserveFrom; f != nil && f.Measure != "" && cm.expr != nil {
			cm.bound = measureIndex(ms, f.Measure)
			for _, field := range cm.expr.Fields {
				b := boundNone
				switch field {
				case f.Prompt:
					b = boundPrompt
				case f.Completion:
					b = boundCompletion
				}
				cm.boundFields = append(cm.boundFields, b)
			}
		}
	}
	return ms, local, nil
}

// tokenBound is which of a request's token bounds a field of a
// measure's expression takes when it reserves on them.
type tokenBound uint8

const (
	boundNone       tokenBound = iota // 0: a field neither bound stands for
	boundPrompt                       // the prompt's bound from the body's size
	boundCompletion                   // the stated completion times the count
)

// eval is m's expression on vals (one per field) for the request whose
// dimension value index is value (any other than one of the values':
// the shared bucket's prices).
func (m *measure) eval(vals []uint64, value int) uint64 {
	if value < 0 || value >= len(m.prices) {
		value = len(m.prices) - 1 // the shared bucket
	}
	return m.expr.Eval(vals, m.prices[value])
}

// boundReservation is what m (reserve_from.measure) reserves of a request
// whose other measures reserved res: its expression on the token bounds
// that the measure it names read, within [1, max]; max, for the reason
// that measure reserved its own max, when it read no bounds.
func (m *measure) boundReservation(res *reserved) (int64, string) {
	if !res.bounds {
		return m.max, res.whys[m.bound]
	}
	var vals [config.MaxSettleFields]uint64
	for i, b := range m.boundFields {
		switch b {
		case boundPrompt:
			vals[i] = res.prompt
		case boundCompletion:
			vals[i] = res.completion
		}
	}
	return min(max(int64(m.eval(vals[:len(m.boundFields)], res.value)), 1), m.max), "bound"
}

// priced reports whether m counts money: its settle reads a price.
func (m *measure) priced() bool { return m.expr != nil && len(m.expr.Prices) > 0 }

// priceValues returns, for each of values and then the shared bucket,
// the values of e's price references: nano-USD per token from cfg's
// prices for that value, or for "*".
func priceValues(cfg *config.Config, e *usage.Expr, values []string) ([][]uint64, error) {
	out := make([][]uint64, len(values)+1)
	for i := range out {
		pr, ok := config.Price{}, false
		if i < len(values) {
			pr, ok = cfg.Prices[values[i]]
		}
		if !ok {
			if pr, ok = cfg.Prices[config.OtherValue]; !ok && len(e.Prices) > 0 {
				return nil, fmt.Errorf("no price for %q nor \"*\"", append(values, config.OtherValue)[i])
			}
		}
		for _, ref := range e.Prices {
			var n int64
			switch ref.Field {
			case "input":
				n = pr.InputNano
			case "output":
				n = pr.OutputNano
			case "cached":
				n = pr.CachedNano
			default:
				return nil, fmt.Errorf("price(%s).%s: unknown price field", ref.Dimension, ref.Field)
			}
			out[i] = append(out[i], uint64(n))
		}
	}
	return out, nil
}

// measureIndex returns the index of the measure named name in ms; -1 for
// "" (a fixed cost).
func measureIndex(ms []*measure, name string) int {
	return slices.IndexFunc(ms, func(m *measure) bool { return m.name == name })
}

// readsBody reports whether a measure of ms reads the response body for
// its usage.
func readsBody(ms []*measure) bool {
	return slices.ContainsFunc(ms, func(m *measure) bool {
		return slices.ContainsFunc(m.fields, func(f usage.Source) bool { return f.JSON != "" || f.SSE != "" })
	})
}

// bodyUsage reports whether a field of a measure of ms is read only from
// the response body (no header can report it).
func bodyUsage(ms []*measure) bool {
	return slices.ContainsFunc(ms, func(m *measure) bool {
		return slices.ContainsFunc(m.fields, func(f usage.Source) bool { return f.Header == "" })
	})
}

// outboundHeaders is upstreamObserver.Outbound: the gateway's own
// headers (ownHeaders), and no request trailer under the name a route
// reserves from (dropReserveTrailers).
func outboundHeaders(out *http.Request) {
	ownHeaders(out)
	dropReserveTrailers(out)
}

// dropReserveTrailers removes from the outbound request's trailers every
// one named as its route's reserve_from header, in any spelling the
// upstream may take for it (case, "_" for "-"). The gateway reserves
// from the header, before the body; some servers merge trailers into the
// headers, so a trailer could state more to the upstream than the header
// had the gateway reserve.
func dropReserveTrailers(out *http.Request) {
	if len(out.Trailer) == 0 {
		return
	}
	st := stateFrom(out.Context())
	if st == nil || st.route == nil {
		return
	}
	for _, m := range st.route.measures {
		if m.reserveFrom.Header == "" {
			continue
		}
		for name := range out.Trailer {
			if headername.Same(name, m.reserveFrom.Header) {
				delete(out.Trailer, name)
			}
		}
	}
}

// pendingSettle is a reservation waiting for its response: the items of
// the settled policies as they were reserved, each taking one measure of
// the route. Exactly one of the usages read from the response, an
// upstream failure, or the end of the request settles it (claim), every
// measure in one store call.
type pendingSettle struct {
	store *stack.Stack
	items []ratelimit.Item
	// at holds, per item, when the store decided its reservation (µs on
	// the store's clock), so that a refund goes back to what it charged.
	at    []int64
	names []string
	// measure holds, per item, the index of its measure in the route's
	// measures; reserved the reservation of each measure.
	measure  []int
	reserved [config.MaxMeasures]int64
	// results are the usages read per field of each measure (at
	// config.MaxSettleFields × its index), and waiting the watched fields
	// whose usage has not been read yet (see observeResponse).
	results [config.MaxMeasures * config.MaxSettleFields]usage.Result
	waiting atomic.Int32
	// value is the request's index of the route's dimension values (see
	// measure.prices).
	value   int
	claimed atomic.Bool
	// span is the request's span, which records the settlement (it ends
	// after the response, when the settlement's outcome is known).
	span trace.Span
}

// claim reports whether the caller is the one to settle p.
func (p *pendingSettle) claim() bool { return p.claimed.CompareAndSwap(false, true) }

// settles reports whether measure m of the route has a settled item.
func (p *pendingSettle) settles(m int) bool { return slices.Contains(p.measure, m) }

// settleTo is what one measure settles to: used units, or, when missing,
// its reservation stands for want of a usage.
type settleTo struct {
	used    int64
	missing bool
}

// reserveForSettle remembers, after an admitted decision d of the items of
// ps, what the route's measures settle: the items of the policies settled
// by a measure that took its reservation (non-shadow, or shadow and
// allowed). Nothing is settled when the store did not decide (d.Failure):
// the reservation was then not taken from it. It reports whether a
// settlement is pending.
func (g *Gateway) reserveForSettle(ctx context.Context, p *pipeline, st *requestState, ps []boundPolicy, items []ratelimit.Item, d ratelimit.Decision) bool {
	if d.Failure != nil || !d.Allowed {
		return false
	}
	ms := st.route.measures
	var ps2 *pendingSettle
	for i := range ps {
		bp := &ps[i]
		if bp.measure < 0 || !bp.settles || !ms[bp.measure].settles || (bp.shadow && !d.Results[i].Allowed) {
			continue
		}
		if ps2 == nil {
			ps2 = &pendingSettle{store: p.store, reserved: st.reserved, value: st.value, span: trace.SpanFromContext(ctx)}
		}
		ps2.items = append(ps2.items, items[i])
		ps2.at = append(ps2.at, d.Results[i].DecidedAt)
		ps2.names = append(ps2.names, bp.name)
		ps2.measure = append(ps2.measure, bp.measure)
	}
	if ps2 == nil {
		return false
	}
	st.settle = ps2
	return true
}

// observeResponse is upstreamObserver.Response: it watches the usage of
// every settled measure of a response whose request holds a reservation,
// in one pass of the body, and settles them all when the body has passed.
func (g *Gateway) observeResponse(resp *http.Response) {
	if resp.Request == nil {
		return
	}
	st := stateFrom(resp.Request.Context())
	if st == nil || st.settle == nil {
		return
	}
	ps, ms, ctx := st.settle, st.route.measures, resp.Request.Context()
	success := resp.StatusCode >= 200 && resp.StatusCode < 300
	var n int32
	for i, m := range ms {
		if ps.settles(i) {
			n += int32(len(m.fields))
		}
	}
	ps.waiting.Store(n)
	for i, m := range ms {
		if !ps.settles(i) {
			continue
		}
		for f, src := range m.fields {
			// Each field's watcher wraps the body the one before installed:
			// every Read and Close passes through all of them on the
			// reading goroutine, and the last to see the end settles.
			usage.Watch(resp, src, m.maxBody, func(res usage.Result) {
				ps.results[i*config.MaxSettleFields+f] = res
				if ps.waiting.Add(-1) != 0 || !ps.claim() {
					return
				}
				var to [config.MaxMeasures]settleTo
				for j, mj := range ms {
					if ps.settles(j) {
						at := j * config.MaxSettleFields
						to[j] = responseSettles(ctx, mj, ps.reserved[j], ps.results[at:at+len(mj.fields)], ps.value, success)
					}
				}
				g.settle(ctx, ps, &to)
			})
		}
	}
}

// responseSettles is what measure m, which reserved reserved, settles to
// with the usages res read (one per field) from a response of a success
// status or not, for a request whose dimension value index is value:
// max when on_missing_usage: max and one is unreported; the reservation
// (missing) when one is absent, or broken off and the usage less than
// reserved; else the usage its expression computes.
func responseSettles(ctx context.Context, m *measure, reserved int64, res []usage.Result, value int, success bool) settleTo {
	var vals [config.MaxSettleFields]uint64
	missing, broken, gone := false, false, false
	for i, r := range res {
		vals[i] = min(r.Units, usage.MaxUnits)
		missing = missing || !r.Found
		broken = broken || brokenOff(r)
		gone = gone || unreported(ctx, r, success)
	}
	used := int64(vals[0])
	if m.expr != nil {
		used = int64(m.eval(vals[:len(res)], value))
	}
	switch {
	case m.missingMax && gone:
		return settleTo{used: max(used, m.max)}
	case missing || broken && used < reserved:
		return settleTo{missing: true}
	}
	return settleTo{used: used}
}

// unreported reports whether res, read from a response of a success
// status or not, leaves a usage unreported that on_missing_usage: max
// charges as max: the client went away (ctx is done, or the body was
// closed before its end) before the usage was whole (a header usage is
// whole when it arrives, a body's at its end), or a success response
// was read to its end without one. An upstream that broke the body off,
// or answered an error status without a usage, is not the caller's
// doing: the reservation stands, as for on_missing_usage: keep.
func unreported(ctx context.Context, res usage.Result, success bool) bool {
	whole := res.Complete || res.Found && !brokenOff(res)
	if !whole {
		return res.Abandoned || ctx.Err() != nil
	}
	return !res.Found && success
}

// brokenOff reports whether res was read from a body that ended before
// its end (the client went away, the upstream cut it). Such a usage may
// cover only part of the work: a stream reports usage as it goes, and the
// upstream may have worked on after the last report. It can charge more
// than was reserved but never refund, or a caller could take a large
// reservation, read until a small running usage, and hang up to get the
// rest back. A header usage is whole when it arrives; a trailer arrives
// only with a complete body.
func brokenOff(res usage.Result) bool {
	return !res.Complete && (res.From == "json" || res.From == "sse")
}

// onUpstreamFailure is upstreamObserver.Failure: the upstream did not serve
// the request (502, 503 or 504 from the gateway, before any byte of a
// response). When an attempt wrote the whole request to the upstream, the
// reservation stands, counted missing: the upstream may have worked on it
// before it timed out (504) or hung up without an answer (502), and a
// caller can bring either about on purpose (a large output, unstreamed; a
// request that crashes the upstream's worker), or such requests would load
// the upstream without using quota. Otherwise (the connection refused, DNS,
// TLS, the upstream breaker or shedder's 503) the upstream never had the
// request and the whole reservation goes back.
//
// Whoever broke the exchange decides: when the caller's body failed (too
// large, malformed, stalled, too slow; see bodyFault) the upstream may
// have acted on the part it received, so the reservation stands as for a
// request written whole, or takes max with on_missing_usage: max, whatever
// the transport reports of the write. Only an exchange the caller did not
// break and that never reached the upstream gives the reservation back.
// Each measure settles by these rules on its own.
func (g *Gateway) onUpstreamFailure(r *http.Request, status int, written bool) {
	st := stateFrom(r.Context())
	if st == nil || st.settle == nil || !st.settle.claim() {
		return
	}
	faulted := st.bodyFault.load() != bodyOK
	var to [config.MaxMeasures]settleTo
	for i, m := range st.route.measures {
		switch {
		case faulted && m.missingMax:
			to[i] = settleTo{used: max(m.max, st.settle.reserved[i])}
		case faulted || written:
			to[i] = settleTo{missing: true}
		}
	}
	g.settle(r.Context(), st.settle, &to)
}

// settlePending is upstreamObserver.Watch (out is the outbound request,
// with the inbound request's context): only a request holding a
// reservation needs to know whether it reached the upstream when it
// fails.
func settlePending(out *http.Request) bool {
	st := stateFrom(out.Context())
	return st != nil && st.settle != nil
}

// endSettle settles as missing a reservation that neither a response nor
// a failure settled (the client went away, the body could not be sent, a
// protocol switch): the reservation stands. A measure with
// on_missing_usage: max of a request whose client went away (ctx is done)
// takes max instead: the upstream may have worked on it all the same.
func (g *Gateway) endSettle(ctx context.Context, st *requestState) {
	if st.settle == nil || !st.settle.claim() {
		return
	}
	gone := ctx.Err() != nil || st.bodyFault.load() != bodyOK
	var to [config.MaxMeasures]settleTo
	for i, m := range st.route.measures {
		to[i] = settleTo{missing: true}
		if m.missingMax && gone {
			to[i] = settleTo{used: m.max}
		}
	}
	g.settle(ctx, st.settle, &to)
}

// settleResult is the settlement counted for a delta of units, or for a
// usage missing.
func settleResult(delta int64, missing bool) string {
	switch {
	case missing:
		return telemetry.SettleMissing
	case delta < 0:
		return telemetry.SettleRefund
	case delta > 0:
		return telemetry.SettleCharge
	}
	return telemetry.SettleExact
}

// settle applies, to each settled policy's key, what its measure used less
// what it reserved (nothing for a measure whose usage is missing: the
// reservation stands), each for its reservation's time (a refund goes
// back to the window it was taken from, and is dropped once that window
// has passed), in one store call made after the response (on its own
// goroutine, which Close waits for), retried once with the same id if it
// timed out. A settlement that gives units back forgets their keys'
// cached denials. The span records the first settled measure's units.
func (g *Gateway) settle(ctx context.Context, ps *pendingSettle, to *[config.MaxMeasures]settleTo) {
	if ps.span.IsRecording() {
		m := ps.measure[0]
		t := to[m]
		delta := t.used - ps.reserved[m]
		if t.missing {
			ps.span.SetAttributes(telemetry.AttrReservedUnits.Int64(ps.reserved[m]), telemetry.AttrSettlement.String(telemetry.SettleMissing))
		} else {
			ps.span.SetAttributes(telemetry.AttrReservedUnits.Int64(ps.reserved[m]), telemetry.AttrSettledUnits.Int64(t.used),
				telemetry.AttrSettlement.String(settleResult(delta, false)))
		}
	}
	var ss []ratelimit.Settlement
	for i, it := range ps.items {
		t := to[ps.measure[i]]
		delta := t.used - ps.reserved[ps.measure[i]]
		if t.missing || delta == 0 {
			continue
		}
		m := ratelimit.MaxSettleDelta(it.Algorithm, it.Limit) // a token bucket's debt is bounded
		ss = append(ss, ratelimit.Settlement{Item: it, Delta: max(-m, min(delta, m)), ReservedAt: ps.at[i]})
	}
	count := func(failed bool) {
		for i, name := range ps.names {
			t := to[ps.measure[i]]
			delta := t.used - ps.reserved[ps.measure[i]]
			if t.missing || failed && delta != 0 {
				g.opts.Metrics.Settlement(ctx, name, telemetry.SettleMissing, 0)
				continue
			}
			g.opts.Metrics.Settlement(ctx, name, settleResult(delta, false), delta)
		}
	}
	if len(ss) == 0 {
		count(false)
		return
	}
	id := newSettleID()
	ctx = context.WithoutCancel(ctx)
	g.settling.Add(1)
	go func() {
		defer g.settling.Done()
		err := g.settleOnce(ctx, ps.store, id, ss)
		if err != nil && ratelimit.FailureKind(err) == "timeout" {
			err = g.settleOnce(ctx, ps.store, id, ss) // idempotent: at most once in all
		}
		if err != nil {
			g.opts.Metrics.StoreError(ctx, ratelimit.FailureKind(err))
			if ok, suppressed := g.logLimit.Allow("settle"); ok {
				g.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "settlement failed; the reservation stands",
					slog.String("error", err.Error()), slog.Int("settlements", len(ss)), slog.Int("suppressed", suppressed))
			}
		}
		count(err != nil)
	}()
}

// settleTimeout bounds one settlement call (the store applies its own,
// shorter, timeout too).
const settleTimeout = 2 * time.Second

// settleOnce makes one settlement call and records its latency.
func (g *Gateway) settleOnce(ctx context.Context, store *stack.Stack, id string, ss []ratelimit.Settlement) error {
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	start := time.Now()
	_, err := store.Settle(ctx, id, ss)
	g.opts.Metrics.StoreCall(ctx, "settle", time.Since(start))
	return err
}

// newSettleID returns a settlement id of 128 random bits. It is the
// gateway's own, never a caller's request id, which a caller could repeat
// to make its charges no-ops.
func newSettleID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// settledPolicies lists the policies a settlement of cfg can count, for
// priming their series: every policy that holds units.
func settledPolicies(cfg *config.Config) []string {
	var out []string
	for name, p := range cfg.Policies {
		if p.Algorithm != ratelimit.Concurrency {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}
