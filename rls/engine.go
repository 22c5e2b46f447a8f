package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/telemetry"
)

// Code is a decision's outcome, numbered as RLS v3's RateLimitResponse.Code.
type Code uint8

// The codes a Response carries.
const (
	OK        Code = 1
	OverLimit Code = 2
)

// String returns "OK" or "OVER_LIMIT", as the RLS enum names them.
func (c Code) String() string {
	if c == OverLimit {
		return "OVER_LIMIT"
	}
	return "OK"
}

// Limits on a request, so that one call cannot hold the store long.
const (
	MaxDescriptors = 64
	MaxEntries     = 32
	// MaxRequestBytes bounds a gRPC request message, before it is
	// decoded: 4 MiB, gRPC's own default. A larger one is
	// RESOURCE_EXHAUSTED. Envoy copies a header into each entry that
	// reads it, so a client sets the size, and a refusal is one Envoy
	// with failure_mode_deny: false answers by applying no limit: 4 MiB
	// holds 68 entries of 60 KiB (Envoy's default max_request_headers_kb).
	MaxRequestBytes = 4 << 20
	// MaxStreams bounds the calls one gRPC connection has open at once
	// (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS). Without it a client could
	// open streams that never send their message, each holding a
	// goroutine, until memory runs out. Envoy opens another connection
	// when one is full.
	MaxStreams = 1024
)

// Request asks for one decision over several descriptors.
type Request struct {
	Domain      string
	Descriptors []Descriptor
	// Hits is the cost of each descriptor without a Hits of its own; 0
	// means 1 (RLS v3's hits_addend).
	Hits uint64
	// DryRun reports what the decision would be without consuming.
	DryRun bool
}

// Descriptor is one list of entries to match, with optional overrides.
type Descriptor struct {
	Entries []Entry
	// Hits, when set, is this descriptor's cost (it may be 0: ask without
	// consuming).
	Hits *uint64
	// Override, when set, replaces the configured limit, as Envoy's
	// per-descriptor limit override does.
	Override *Override
}

// Override is a limit a client sends with a descriptor.
type Override struct {
	RequestsPerUnit uint32
	Unit            Unit
	// Multiplier multiplies the unit's length; 0 means 1.
	Multiplier uint32
}

// Status is the outcome for one descriptor.
type Status struct {
	Code Code
	// Rule is the matched rule; nil when none matched (Code OK, no limit).
	Rule *Rule
	// Remaining is the whole number of units left after the decision;
	// math.MaxUint32 for an unlimited rule, 0 without a rule.
	Remaining uint32
	// ResetAfter is RLS's duration_until_reset: how long until the
	// descriptor is back at its full limit, or, when over, until the
	// request's cost fits again. 0 without a rule.
	ResetAfter time.Duration
	// ShadowOver reports a shadow or quota rule that was over; its Code
	// stays OK.
	ShadowOver bool
}

// Response is the outcome of Decide.
type Response struct {
	Overall  Code
	Statuses []Status
	// RetryAfter is the longest wait among the non-shadow descriptors over
	// their limit; 0 when Overall is OK.
	RetryAfter time.Duration
	// Fallback names the on_store_error mode that decided, "" when the
	// store did.
	Fallback string
}

var (
	// ErrUnavailable means the store could not decide and a matched rule's
	// on_store_error is unavailable: gRPC UNAVAILABLE, HTTP 503.
	ErrUnavailable = errors.New("rls: store unavailable")
	// ErrBadRequest means the request is malformed: gRPC
	// INVALID_ARGUMENT, HTTP 400. Its message never holds a client value.
	ErrBadRequest = errors.New("rls: bad request")
)

// Options configure an Engine.
type Options struct {
	// Store decides; required. The Engine does not close it. It should be
	// a stack.Stack (or have a stack.Fallback on top), which applies
	// each item's on_store_error when the store below fails; the error of a
	// store without one is answered as ErrUnavailable.
	Store ratelimit.Store
	// Timeout bounds one store decision; past it the store's failure mode
	// applies. 0 means 25ms.
	Timeout time.Duration
	// KeyPrefix starts every store key (default "qg").
	KeyPrefix string
	// OnStoreError is the mode of rules without their own: unavailable
	// (the default), open, closed or local.
	OnStoreError string
	// RetryAfter is when a descriptor that on_store_error closed made
	// OVER_LIMIT may be decided again: its duration_until_reset, about the
	// time until the store is tried again (the store's circuit breaker
	// cooldown). 0 means 1s.
	RetryAfter time.Duration
	// IgnoreOverrides drops every descriptor's limit override, malformed
	// ones included: descriptors are decided by the rules alone
	// (rls.limit_overrides: ignore). False applies them.
	IgnoreOverrides bool
	// Metrics counts decisions; nil counts nothing.
	Metrics *telemetry.Metrics
	// Logger receives a warning when the store fails (at most 5 per 10s
	// per kind of failure); nil logs nothing.
	Logger         *slog.Logger
	TracerProvider trace.TracerProvider
	// Now is the clock of banned rules' reset times; nil means time.Now.
	Now func() time.Time
}

// Engine turns descriptors into store items and decides them. It is safe for
// concurrent use; SetRules swaps the rules atomically.
type Engine struct {
	opts     Options
	live     atomic.Pointer[live]
	tracer   trace.Tracer
	logLimit *telemetry.LogLimiter
}

// NewEngine returns an Engine deciding with rules on o.Store.
func NewEngine(rules *Rules, o Options) *Engine {
	if o.Timeout <= 0 {
		o.Timeout = 25 * time.Millisecond
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = "qg"
	}
	if o.RetryAfter <= 0 {
		o.RetryAfter = time.Second
	}
	if o.OnStoreError == "" {
		o.OnStoreError = "unavailable"
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	tp := o.TracerProvider
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	e := &Engine{opts: o, tracer: tp.Tracer("github.com/quotagate/quotagate/rls"), logLimit: telemetry.NewLogLimiter(5, 10*time.Second, nil)}
	e.live.Store(&live{rules: rules, onStoreError: o.OnStoreError, ignoreOverrides: o.IgnoreOverrides})
	return e
}

// live is what a reload replaces, swapped as one value.
type live struct {
	rules           *Rules
	onStoreError    string
	ignoreOverrides bool
}

// SetRules replaces the rules, the default on_store_error ("" keeps the
// current one) and whether limit overrides are ignored (see
// Options.IgnoreOverrides) for every later decision.
func (e *Engine) SetRules(rules *Rules, onStoreError string, ignoreOverrides bool) {
	if onStoreError == "" {
		onStoreError = e.live.Load().onStoreError
	}
	e.live.Store(&live{rules: rules, onStoreError: onStoreError, ignoreOverrides: ignoreOverrides})
}

// Rules returns the rules in use.
func (e *Engine) Rules() *Rules { return e.live.Load().rules }

// checkCounts rejects a request of n descriptors, the i-th with
// entries(i) entries, outside 1..MaxDescriptors and 1..MaxEntries. The
// front doors call it on the wire's form before they allocate anything
// proportional to the request.
func checkCounts(n int, entries func(i int) int) error {
	switch {
	case n == 0:
		return fmt.Errorf("%w: descriptors must not be empty", ErrBadRequest)
	case n > MaxDescriptors:
		return fmt.Errorf("%w: at most %d descriptors, got %d", ErrBadRequest, MaxDescriptors, n)
	}
	for i := range n {
		if k := entries(i); k == 0 || k > MaxEntries {
			return fmt.Errorf("%w: descriptors[%d] must have 1 to %d entries, got %d", ErrBadRequest, i, MaxEntries, k)
		}
	}
	return nil
}

// checkRequest validates a request's shape; limit overrides only when
// they apply (overrides).
func checkRequest(req *Request, overrides bool) error {
	if req.Domain == "" {
		return fmt.Errorf("%w: domain must not be empty", ErrBadRequest)
	}
	if err := checkCounts(len(req.Descriptors), func(i int) int { return len(req.Descriptors[i].Entries) }); err != nil {
		return err
	}
	for i, d := range req.Descriptors {
		for j, en := range d.Entries {
			if en.Key == "" {
				return fmt.Errorf("%w: descriptors[%d].entries[%d].key must not be empty", ErrBadRequest, i, j)
			}
		}
		if o := d.Override; o != nil && overrides {
			switch u := o.Unit.Duration(); {
			case u == 0:
				return fmt.Errorf("%w: descriptors[%d].limit.unit is unknown", ErrBadRequest, i)
			case time.Duration(max(o.Multiplier, 1)) > math.MaxInt64/u:
				return fmt.Errorf("%w: descriptors[%d].limit: unit × unit_multiplier exceeds 292 years", ErrBadRequest, i)
			}
		}
	}
	return nil
}

// plan is one request's rules and items.
type plan struct {
	statuses []Status
	items    []ratelimit.Item
	// itemOf maps each item back to its descriptor.
	itemOf []int
	// costs are the items' costs as asked; the items carry 0 when zeroed.
	costs  []int64
	zeroed bool
	// modes are the items' on_store_error modes, as configured.
	modes []string
	// over counts the non-shadow rules over by construction (a banned
	// rule, or a cost above capacity): the request is OVER_LIMIT whatever
	// the store says, so nothing is consumed.
	over int
}

// Decide decides req: every matched rule of every descriptor in one
// Store.Decide call, so that either all of the request's non-shadow costs
// are consumed or none is (within one hash slot; see ratelimit.Store for
// several). Unmatched descriptors and unknown domains are OK. The error
// wraps ErrBadRequest or ErrUnavailable, or ctx's error when the caller
// left before the store decided. A store call is bounded by
// Options.Timeout; ctx's own deadline, when shorter, cancels the call
// without counting as a store failure.
func (e *Engine) Decide(ctx context.Context, req *Request) (Response, error) {
	lv := e.live.Load()
	if err := checkRequest(req, !lv.ignoreOverrides); err != nil {
		return Response{}, err
	}
	dom := lv.rules.Domain(req.Domain)
	ctx, span := e.tracer.Start(ctx, "quotagate.rls.decide", trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	if span.IsRecording() {
		name := "(unknown)"
		if dom != nil {
			name = dom.Name // configured, so bounded
		}
		span.SetAttributes(telemetry.AttrDomain.String(name), telemetry.AttrDescriptors.Int(len(req.Descriptors)),
			telemetry.AttrDryRun.Bool(req.DryRun))
	}
	resp := Response{Overall: OK, Statuses: make([]Status, len(req.Descriptors))}
	if dom == nil {
		span.SetAttributes(telemetry.AttrDecision.String("no_domain"))
		for i := range resp.Statuses {
			resp.Statuses[i].Code = OK
		}
		return resp, nil
	}
	p := e.plan(dom, req, resp.Statuses, lv)
	if len(p.items) == 0 {
		e.finish(ctx, span, req, p, &resp, ratelimit.Decision{Allowed: true}, true)
		return resp, nil
	}
	if p.over > 0 || req.DryRun {
		p.zero(p.items)
	}
	if err := ctx.Err(); err != nil {
		return Response{}, callerLeft(err)
	}
	// The store call's deadline is the service's own. A caller's shorter
	// one (grpc-timeout) cancels the call when it passes rather than
	// becoming its deadline: a caller that gives up is not a store that
	// timed out, and must not count toward the circuit breaker, which
	// would fail every other caller's decisions too.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.opts.Timeout)
	stop := context.AfterFunc(ctx, cancel)
	start := time.Now()
	d, err := e.opts.Store.Decide(sctx, p.items)
	stop()
	cancel()
	if m := e.opts.Metrics; m != nil {
		m.DecisionDuration(ctx, "rls", time.Since(start))
		m.StoreCall(ctx, "decide", time.Since(start))
	}
	if cerr := ctx.Err(); cerr != nil && (err != nil || d.Failure != nil) {
		return Response{}, callerLeft(cerr)
	}
	switch {
	case err != nil: // a store without a Fallback layer
		e.storeFailed(ctx, span, p, err)
		return Response{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	case d.Failure != nil:
		return e.fellBack(ctx, span, req, p, &resp, d)
	}
	e.finish(ctx, span, req, p, &resp, d, true)
	return resp, nil
}

// callerLeft is Decide's error when the caller's context ended (it
// cancelled, or its deadline passed) before the store decided: nothing is
// counted as a store failure and no on_store_error applies.
func callerLeft(err error) error { return fmt.Errorf("rls: the caller left: %w", err) }

// onError maps an on_store_error mode to what the store's Fallback layer
// applies: unavailable refuses the batch (ratelimit.OnErrorClosed, which
// the gateway answers 503); closed is allowed there and made OVER_LIMIT by
// the Engine (see fellBack).
var onError = map[string]ratelimit.OnError{
	"unavailable": ratelimit.OnErrorClosed,
	"open":        ratelimit.OnErrorOpen,
	"closed":      ratelimit.OnErrorOpen,
	"local":       ratelimit.OnErrorLocal,
}

// plan matches each descriptor, applies replaces, and builds the items.
func (e *Engine) plan(dom *Domain, req *Request, statuses []Status, lv *live) *plan {
	defaultMode := lv.onStoreError
	p := &plan{statuses: statuses}
	var replaced map[string]bool
	var shared map[int][]string // share_threshold values by descriptor, rarely any
	for i, desc := range req.Descriptors {
		st := &statuses[i]
		st.Code = OK
		if desc.Override != nil && !lv.ignoreOverrides {
			st.Rule = overrideRule(dom, desc.Override)
			continue
		}
		r, values := dom.Match(desc.Entries)
		st.Rule = r
		if values != nil {
			if shared == nil {
				shared = make(map[int][]string)
			}
			shared[i] = values
		}
		if r != nil && len(r.Replaces) > 0 {
			if replaced == nil {
				replaced = make(map[string]bool)
			}
			for _, n := range r.Replaces {
				replaced[n] = true
			}
		}
	}
	for i, desc := range req.Descriptors {
		st := &statuses[i]
		r := st.Rule
		if r == nil {
			continue
		}
		if r.Name != "" && replaced[r.Name] {
			st.Rule = nil
			continue
		}
		if r.Unlimited {
			st.Remaining = math.MaxUint32
			continue
		}
		cost := req.Hits
		if desc.Hits != nil {
			cost = *desc.Hits
		} else if cost == 0 {
			cost = 1
		}
		deny := r.banned() && cost > 0
		if r.banned() {
			u := int64(r.Unit.Duration())
			st.ResetAfter = time.Duration(u - e.opts.Now().UnixNano()%u)
		} else {
			c := ratelimit.Capacity(r.Algorithm, r.Limit)
			if cost > uint64(c) {
				deny, cost = true, 0
			}
			mode := r.OnStoreError
			if mode == "" {
				mode = defaultMode
			}
			p.items = append(p.items, ratelimit.Item{
				Key: e.key(dom.Name, r, desc.Entries, shared[i]), Algorithm: r.Algorithm, Limit: r.Limit,
				Cost: int64(cost), Shadow: r.Shadow || r.Quota, OnError: onError[mode],
			})
			p.modes = append(p.modes, mode)
			p.itemOf = append(p.itemOf, i)
			p.costs = append(p.costs, int64(cost))
		}
		if deny {
			st.Code = OverLimit
			if r.Shadow || r.Quota {
				st.Code, st.ShadowOver = OK, true
			} else {
				p.over++
			}
		}
	}
	return p
}

// zero makes items ask without consuming (a dry run, or a request already
// over by construction).
func (p *plan) zero(items []ratelimit.Item) {
	p.zeroed = true
	for i := range items {
		items[i].Cost = 0
	}
}

// overrideRule is the rule of a client's limit override: a fixed window of
// the given size, keyed like the descriptor's own (see exactOverride for
// one the store cannot apply exactly).
func overrideRule(dom *Domain, o *Override) *Rule {
	r := &Rule{Path: dom.Name + ".override", Unit: o.Unit, RequestsPerUnit: o.RequestsPerUnit, Algorithm: ratelimit.FixedWindow, code: "fo"}
	if o.RequestsPerUnit > 0 {
		r.Limit = exactOverride(int64(o.RequestsPerUnit), o.Unit.Duration()*time.Duration(max(o.Multiplier, 1)))
		if r.Limit.Validate(r.Algorithm) != nil {
			r.Unlimited = true // not reached: exactOverride always fits
		}
	}
	return r
}

// maxExactMicros bounds requests × window (in µs) of a fixed window that
// the store applies exactly (2^53, as ratelimit.Limit.Validate checks).
const maxExactMicros = 1 << 53

// exactOverride returns a fixed window of rate per per (per a whole number
// of seconds, at most 292 years: checkRequest refuses longer) that the store
// applies exactly. When rate × per is beyond 2^53 µs, both are divided by
// the smallest k that brings it within (rate/k per per/k, rounded down: the
// same long-run rate, a burst k times smaller), or, for a rate below k,
// the window is shortened to the longest exact one (1 per 300 years becomes
// 1 per 285 years). Either way the override still limits; it never becomes
// no limit at all.
func exactOverride(rate int64, per time.Duration) ratelimit.Limit {
	us := per.Microseconds()
	fit := maxExactMicros / rate // the longest exact window for rate, in µs
	if us <= fit {
		return ratelimit.Limit{Rate: rate, Per: per}
	}
	k := (us + fit - 1) / fit
	if rate < k {
		return ratelimit.Limit{Rate: rate, Per: time.Duration(fit) * time.Microsecond}
	}
	return ratelimit.Limit{Rate: rate / k, Per: time.Duration(us/k) * time.Microsecond}
}

// finish fills the statuses from a decision and counts it.
// With count false (a fallback decision), nothing is counted.
func (e *Engine) finish(ctx context.Context, span trace.Span, req *Request, p *plan, resp *Response, d ratelimit.Decision, count bool) {
	for k, res := range d.Results {
		st := &p.statuses[p.itemOf[k]]
		shadow := st.Rule.Shadow || st.Rule.Quota
		st.Remaining = uint32(min(res.Remaining, math.MaxUint32))
		st.ResetAfter = res.ResetAfter
		// A zeroed item asked without consuming: its cost would not
		// have fit if fewer units remain.
		over := !res.Allowed || p.zeroed && res.Fallback != ratelimit.OnErrorOpen && res.Remaining < p.costs[k]
		if over || st.Code == OverLimit || st.ShadowOver {
			st.ResetAfter = max(res.RetryAfter, res.ResetAfter)
			if shadow {
				st.ShadowOver = true
			} else {
				st.Code = OverLimit
			}
		}
	}
	e.overall(resp, p)
	if count && !req.DryRun {
		for i := range p.statuses {
			st := &p.statuses[i]
			if st.Rule == nil || st.Rule.Unlimited {
				continue
			}
			switch {
			case st.Code == OverLimit:
				e.count(ctx, st.Rule.Path, telemetry.ResultDenied)
			case st.ShadowOver:
				e.count(ctx, st.Rule.Path, telemetry.ResultShadowDenied)
			case resp.Overall == OK:
				e.count(ctx, st.Rule.Path, telemetry.ResultAllowed)
			}
		}
	}
	if span.IsRecording() {
		span.SetAttributes(telemetry.AttrDecision.String(resp.Overall.String()))
	}
}

// overall sets the response's code: OVER_LIMIT if any non-shadow rule is
// over, or every quota rule is.
func (e *Engine) overall(resp *Response, p *plan) {
	quota, quotaOver := 0, 0
	for i := range p.statuses {
		st := &p.statuses[i]
		if st.Rule != nil && st.Rule.Quota {
			quota++
			if st.ShadowOver {
				quotaOver++
			}
		}
		if st.Code == OverLimit {
			resp.Overall = OverLimit
			resp.RetryAfter = max(resp.RetryAfter, st.ResetAfter)
		}
	}
	if quota > 0 && quota == quotaOver {
		resp.Overall = OverLimit
	}
}

func (e *Engine) count(ctx context.Context, path, result string) {
	if m := e.opts.Metrics; m != nil {
		m.Decision(ctx, path, "rls", result)
	}
}

// storeFailed records that the store could not decide: the error's kind,
// and an error result for every rule of the request.
func (e *Engine) storeFailed(ctx context.Context, span trace.Span, p *plan, err error) {
	kind := ratelimit.FailureKind(err)
	span.RecordError(err)
	span.SetStatus(codes.Error, "store "+kind)
	m := e.opts.Metrics
	m.StoreError(ctx, kind)
	if ok, suppressed := e.logLimit.Allow(kind); ok { // kind is one of four constants
		e.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "rls: store failed; applying on_store_error",
			slog.String("kind", kind), slog.String("error", err.Error()), slog.Int("suppressed", suppressed))
	}
	for k := range p.items {
		path := p.statuses[p.itemOf[k]].Rule.Path
		m.StoreFallback(ctx, path, p.modes[k])
		e.count(ctx, path, telemetry.ResultError)
	}
}

// fellBack answers a decision the store's Fallback layer made by the
// items' on_store_error after the store failed: unavailable (on a
// non-shadow rule) fails the call, closed makes its descriptor OVER_LIMIT
// until Options.RetryAfter (not its unit: a client told to wait a day for
// a blip of Redis would), local was decided on this instance's share of
// the limit, open is OK.
func (e *Engine) fellBack(ctx context.Context, span trace.Span, req *Request, p *plan, resp *Response, d ratelimit.Decision) (Response, error) {
	e.storeFailed(ctx, span, p, d.Failure)
	if d.Unavailable {
		span.SetAttributes(telemetry.AttrDecision.String("unavailable"))
		return Response{}, fmt.Errorf("%w: %w", ErrUnavailable, d.Failure)
	}
	e.finish(ctx, span, req, p, resp, d, false)
	resp.Fallback = "open"
	for k, it := range p.items {
		switch {
		case p.modes[k] == "closed" && !it.Shadow:
			st := &p.statuses[p.itemOf[k]]
			st.Code, st.ResetAfter = OverLimit, e.opts.RetryAfter
			resp.Fallback = "closed"
		case p.modes[k] == "local" && resp.Fallback == "open":
			resp.Fallback = "local"
		}
	}
	e.overall(resp, p)
	span.SetAttributes(telemetry.AttrDecision.String("fallback_" + resp.Overall.String()))
	return *resp, nil
}
