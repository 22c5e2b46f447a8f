package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
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

// costBlock is a route's cost block (config.CostBlock), compiled.
type costBlock struct {
	reserve, max int64
	// reserveFrom is where a request states its reservation; asks reports
	// whether there is such a source.
	reserveFrom usage.RequestSource
	asks        bool
	// settleFrom is where a response reports its usage; settles reports
	// whether there is such a source (otherwise nothing is settled).
	settleFrom usage.Source
	settles    bool
	// policies are the names of the settled policies.
	policies []string
	maxBody  int64
	// missingMax: a request whose usage goes unreported (see
	// unreported) takes max (on_missing_usage: max), not its reservation.
	missingMax bool
}

// compileCost returns the compiled cost block of rc, nil for a fixed cost.
func compileCost(rc config.Route) *costBlock {
	b := rc.Settle
	if b == nil {
		return nil
	}
	cb := &costBlock{reserve: b.Reserve, max: b.Max, maxBody: b.MaxBody, missingMax: b.OnMissingUsage == config.MissingUsageMax}
	if f := b.ReserveFrom; f != nil {
		cb.reserveFrom, cb.asks = usage.RequestSource{JSON: f.JSON, JSONAliases: f.JSONAliases, JSONCount: f.JSONCount, Header: f.Header}, true
	}
	if f := b.SettleFrom; f != nil {
		cb.settleFrom, cb.settles = usage.Source{Header: f.Header, JSON: f.JSON, SSE: f.SSE}, true
	}
	cb.policies = b.SettlePolicies
	if len(cb.policies) == 0 {
		cb.policies = rc.Policies
	}
	return cb
}

// maxCost is the most units a request of rc may take: its cost block's
// max, or its fixed cost.
func maxCost(rc config.Route) int64 {
	if rc.Settle != nil {
		return max(rc.Settle.Max, rc.Cost)
	}
	return rc.Cost
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
	if st == nil || st.route == nil || st.route.block == nil || st.route.block.reserveFrom.Header == "" {
		return
	}
	for name := range out.Trailer {
		if headername.Same(name, st.route.block.reserveFrom.Header) {
			delete(out.Trailer, name)
		}
	}
}

// pendingSettle is a reservation waiting for its response: the items of
// the settled policies as they were reserved. Exactly one of the usage
// read from the response, an upstream failure, or the end of the request
// settles it (claim).
type pendingSettle struct {
	store *stack.Stack
	items []ratelimit.Item
	// at holds, per item, when the store decided its reservation (µs on
	// the store's clock), so that a refund goes back to what it charged.
	at       []int64
	names    []string
	reserved int64
	claimed  atomic.Bool
	// span is the request's span, which records the settlement (it ends
	// after the response, when the settlement's outcome is known).
	span trace.Span
}

// claim reports whether the caller is the one to settle p.
func (p *pendingSettle) claim() bool { return p.claimed.CompareAndSwap(false, true) }

// reserveForSettle remembers, after an admitted decision d of the items of
// ps, what the route's cost block settles: the items of its settled
// policies that took the reservation (non-shadow, or shadow and allowed).
// Nothing is settled when the store did not decide (d.Failure): the
// reservation was then not taken from it. It reports whether a settlement
// is pending.
func (g *Gateway) reserveForSettle(ctx context.Context, p *pipeline, st *requestState, ps []boundPolicy, items []ratelimit.Item, d ratelimit.Decision) bool {
	cb := st.route.block
	if cb == nil || !cb.settles || d.Failure != nil || !d.Allowed {
		return false
	}
	ps2 := &pendingSettle{store: p.store, reserved: st.cost, span: trace.SpanFromContext(ctx)}
	for i := range ps {
		if !slices.Contains(cb.policies, ps[i].name) || ps[i].algorithm == ratelimit.Concurrency ||
			(ps[i].shadow && !d.Results[i].Allowed) {
			continue
		}
		ps2.items = append(ps2.items, items[i])
		ps2.at = append(ps2.at, d.Results[i].DecidedAt)
		ps2.names = append(ps2.names, ps[i].name)
	}
	if len(ps2.items) == 0 {
		return false
	}
	st.settle = ps2
	return true
}

// observeResponse is upstreamObserver.Response: it watches the usage of
// a response whose request holds a reservation, and settles it when the
// body has passed.
func (g *Gateway) observeResponse(resp *http.Response) {
	if resp.Request == nil {
		return
	}
	st := stateFrom(resp.Request.Context())
	if st == nil || st.settle == nil {
		return
	}
	ps, cb, ctx := st.settle, st.route.block, resp.Request.Context()
	success := resp.StatusCode >= 200 && resp.StatusCode < 300
	usage.Watch(resp, cb.settleFrom, cb.maxBody, func(res usage.Result) {
		if !ps.claim() {
			return
		}
		used := int64(min(res.Units, usage.MaxUnits))
		if cb.missingMax && unreported(ctx, res, success) {
			g.settle(ctx, ps, max(used, cb.max))
			return
		}
		if !res.Found || brokenOff(res) && used < ps.reserved {
			g.settleMissing(ctx, ps)
			return
		}
		g.settle(ctx, ps, used)
	})
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
func (g *Gateway) onUpstreamFailure(r *http.Request, status int, written bool) {
	st := stateFrom(r.Context())
	if st == nil || st.settle == nil || !st.settle.claim() {
		return
	}
	if st.bodyFault.load() != bodyOK {
		if cb := st.route.block; cb.missingMax {
			g.settle(r.Context(), st.settle, max(cb.max, st.settle.reserved))
			return
		}
		g.settleMissing(r.Context(), st.settle)
		return
	}
	if written {
		g.settleMissing(r.Context(), st.settle)
		return
	}
	g.settle(r.Context(), st.settle, 0)
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
// protocol switch): the reservation stands. On a route with
// on_missing_usage: max, a request whose client went away (ctx is done)
// takes max instead: the upstream may have worked on it all the same.
func (g *Gateway) endSettle(ctx context.Context, st *requestState) {
	if st.settle == nil || !st.settle.claim() {
		return
	}
	if cb := st.route.block; cb.missingMax && (ctx.Err() != nil || st.bodyFault.load() != bodyOK) {
		g.settle(ctx, st.settle, cb.max)
		return
	}
	g.settleMissing(ctx, st.settle)
}

// settleMissing counts a reservation that stands for want of a usage.
func (g *Gateway) settleMissing(ctx context.Context, ps *pendingSettle) {
	if ps.span.IsRecording() {
		ps.span.SetAttributes(telemetry.AttrReservedUnits.Int64(ps.reserved), telemetry.AttrSettlement.String(telemetry.SettleMissing))
	}
	for _, name := range ps.names {
		g.opts.Metrics.Settlement(ctx, name, telemetry.SettleMissing, 0)
	}
}

// settle applies used - reserved to the settled policies' keys, each for
// its reservation's time (a refund goes back to the window it was taken
// from, and is dropped once that window has passed), in one store call
// made after the response (on its own goroutine, which Close
// waits for), retried once with the same id if it timed out. A settlement
// that gives units back forgets their keys' cached denials.
func (g *Gateway) settle(ctx context.Context, ps *pendingSettle, used int64) {
	delta := used - ps.reserved
	result := telemetry.SettleExact
	switch {
	case delta < 0:
		result = telemetry.SettleRefund
	case delta > 0:
		result = telemetry.SettleCharge
	}
	if ps.span.IsRecording() {
		ps.span.SetAttributes(telemetry.AttrReservedUnits.Int64(ps.reserved), telemetry.AttrSettledUnits.Int64(used),
			telemetry.AttrSettlement.String(result))
	}
	if delta == 0 {
		for _, name := range ps.names {
			g.opts.Metrics.Settlement(ctx, name, result, 0)
		}
		return
	}
	ss := make([]ratelimit.Settlement, len(ps.items))
	for i, it := range ps.items {
		m := ratelimit.MaxSettleDelta(it.Algorithm, it.Limit) // a token bucket's debt is bounded
		ss[i] = ratelimit.Settlement{Item: it, Delta: max(-m, min(delta, m)), ReservedAt: ps.at[i]}
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
					slog.String("error", err.Error()), slog.Int64("delta", delta), slog.Int("suppressed", suppressed))
			}
			result, delta = telemetry.SettleMissing, 0
		}
		for _, name := range ps.names {
			g.opts.Metrics.Settlement(ctx, name, result, delta)
		}
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
