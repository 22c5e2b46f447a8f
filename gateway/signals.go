package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/ratelimit"
)

// The signals OpenAI's SDKs read, sent on the routes with client_signals:
// openai beside the gateway's own (RateLimit, Retry-After). Names in Go's
// canonical spelling, stored directly (header names are case-insensitive).
const (
	hdrRetryAfterMS      = "Retry-After-Ms"
	hdrShouldRetry       = "X-Should-Retry"
	hdrLimitRequests     = "X-Ratelimit-Limit-Requests"
	hdrRemainingRequests = "X-Ratelimit-Remaining-Requests"
	hdrResetRequests     = "X-Ratelimit-Reset-Requests"
	hdrLimitTokens       = "X-Ratelimit-Limit-Tokens"
	hdrRemainingTokens   = "X-Ratelimit-Remaining-Tokens"
	hdrResetTokens       = "X-Ratelimit-Reset-Tokens"
	openAIRateLimitCode  = "rate_limit_exceeded"
	openAIInvalidRequest = "invalid_request_error"
	openAIRequestsType   = "requests"
	openAITokensType     = "tokens"
	// openAIQuotaType is the type and code OpenAI answers a spent quota
	// (billing) with, which clients tell from a rate limit so as not to
	// retry it: a money policy's denial says it.
	openAIQuotaType   = "insufficient_quota"
	openAIContentType = "application/json"
)

// maxClientRetryWait is the longest wait OpenAI's SDKs honor from
// retry-after-ms or Retry-After: the Node SDK (openai 7.55,
// client.js retryRequest) takes a wait over 60 * 1000 ms as absent and
// retries after its own backoff of 0.5 s to 8 s instead; the Python SDK,
// made by the same generator, keeps a wait only while 0 < wait <= 60 s
// (_calculate_retry_timeout). A denial that
// waits longer says x-should-retry: false, so that the SDK raises the 429
// at once rather than coming back three times before the time is up.
const maxClientRetryWait = 60 * time.Second

// signalClass is which of OpenAI's two families of limits a policy's
// numbers are reported in: x-ratelimit-*-requests or -tokens.
type signalClass uint8

const (
	signalNone     signalClass = iota // not reported (a concurrency policy: requests in flight, no window)
	signalRequests                    // counts requests
	signalTokens                      // counts tokens
)

// policySignalClass classifies bp, a policy bound on route r (nil for
// stage 1), for the x-ratelimit-* headers: a concurrency policy is not
// reported; a policy whose cost is a measure of the route that settles it
// (stage 1 when it takes the route's cost block) counts tokens; one whose
// cost is a number, or that keeps a cost block's reservation (not among
// its settle_policies), counts requests. A measure priced by price(...)
// counts money and is not reported.
//
// It is the one place that tells request policies from token policies.
func policySignalClass(r *route, bp *boundPolicy) signalClass {
	switch {
	case bp == nil:
		if r.localMeasure >= 0 {
			return signalTokens
		}
		return signalRequests
	case bp.algorithm == ratelimit.Concurrency:
		return signalNone
	case bp.measure >= 0 && r.measures[bp.measure].priced():
		return signalNone // money, neither requests nor tokens
	case bp.measure >= 0 && bp.settles:
		return signalTokens
	}
	return signalRequests
}

// boundNamed returns the policy of ps named name; nil for stage 1 (or a
// name not among them).
func boundNamed(ps []boundPolicy, name string) *boundPolicy {
	for i := range ps {
		if ps[i].name == name {
			return &ps[i]
		}
	}
	return nil
}

// signalFamily is what the x-ratelimit-*-requests (or -tokens) headers
// say: the policy of the family that binds (the denying one with the
// longest wait, else the one with the least left).
type signalFamily struct {
	policy    string        // "" when no policy of the route is in the family
	limit     int64         // units of the policy's capacity
	remaining int64         // units left
	reset     time.Duration // until the policy is back to its full capacity
	retry     time.Duration // until the request's cost fits; 0 when it fits
}

// consider makes the family's numbers those of policy when it binds more
// than the policy held so far.
func (f *signalFamily) consider(policy string, res ratelimit.Result) {
	binds := f.policy == "" ||
		!res.Allowed && res.RetryAfter > f.retry ||
		res.Allowed && f.retry == 0 && res.Remaining < f.remaining
	if !binds {
		return
	}
	*f = signalFamily{policy: policy, limit: res.Limit, remaining: res.Remaining, reset: res.ResetAfter}
	if !res.Allowed {
		f.retry = res.RetryAfter
		f.reset = max(f.reset, f.retry)
	}
}

// clientSignals holds both families for one request.
type clientSignals struct {
	requests, tokens signalFamily
}

// family returns the family of class c (nil for signalNone).
func (s *clientSignals) family(c signalClass) *signalFamily {
	switch c {
	case signalRequests:
		return &s.requests
	case signalTokens:
		return &s.tokens
	}
	return nil
}

// openAISignals reports whether st's route answers with OpenAI's signals.
func openAISignals(st *requestState) bool {
	return st != nil && st.route != nil && st.route.signals == config.ClientSignalsOpenAI
}

// collectSignals fills st.signals from the global stage's decision d of
// policies ps: every non-shadow policy the store decided (or a Fallback
// decided on its local share) is reported in its family.
func collectSignals(st *requestState, ps []boundPolicy, d ratelimit.Decision) {
	for i, res := range d.Results {
		bp := &ps[i]
		if bp.shadow || d.Failure != nil && res.Fallback != ratelimit.OnErrorLocal {
			continue
		}
		if f := st.signals.family(policySignalClass(st.route, bp)); f != nil {
			f.consider(bp.name, res)
		}
	}
}

// collectLocalSignals fills st.signals from stage 1's view v (a token
// bucket per caller).
func collectLocalSignals(st *requestState, v rateLimitView) {
	f := st.signals.family(policySignalClass(st.route, nil))
	res := ratelimit.Result{Allowed: v.retry == 0, Limit: v.quota, Remaining: v.remaining, RetryAfter: v.retry, ResetAfter: v.reset}
	f.consider(localPolicy, res)
}

// setSignalHeaders writes the x-ratelimit-* headers of each family a
// policy of the route is in: limit and remaining in units, reset in
// OpenAI's duration format (formatReset).
func setSignalHeaders(h http.Header, s *clientSignals) {
	if f := &s.requests; f.policy != "" {
		h[hdrLimitRequests] = []string{strconv.FormatInt(f.limit, 10)}
		h[hdrRemainingRequests] = []string{strconv.FormatInt(max(f.remaining, 0), 10)}
		h[hdrResetRequests] = []string{formatReset(f.reset)}
	}
	if f := &s.tokens; f.policy != "" {
		h[hdrLimitTokens] = []string{strconv.FormatInt(f.limit, 10)}
		h[hdrRemainingTokens] = []string{strconv.FormatInt(max(f.remaining, 0), 10)}
		h[hdrResetTokens] = []string{formatReset(f.reset)}
	}
}

// dropUpstreamSignals removes from an upstream response's headers the
// x-ratelimit-* headers of each family the gateway reports for the
// request, so that the client reads one value, the gateway's; an
// upstream's other headers (its own retry-after-ms on its own 429) pass.
func dropUpstreamSignals(h http.Header, s *clientSignals) {
	if s.requests.policy != "" {
		delete(h, hdrLimitRequests)
		delete(h, hdrRemainingRequests)
		delete(h, hdrResetRequests)
	}
	if s.tokens.policy != "" {
		delete(h, hdrLimitTokens)
		delete(h, hdrRemainingTokens)
		delete(h, hdrResetTokens)
	}
}

// formatReset writes d as OpenAI's x-ratelimit-reset-* values do, which
// is Go's time.Duration format ("1s", "6m0s", "20ms", "17.2s"), here
// rounded up to the millisecond so that a client never reads an earlier
// time than the exact one; 0 is "0s".
func formatReset(d time.Duration) string {
	return (time.Duration(ceilMillis(d)) * time.Millisecond).String()
}

// openAIError is the body OpenAI's API answers errors with, which its
// SDKs parse into the error's message, type, param and code.
type openAIError struct {
	Error openAIErrorBody `json:"error"`
}

type openAIErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"` // always null: the gateway names no parameter
	Code    string  `json:"code"`
}

// denyOpenAI answers 429 on a route with client_signals: openai: the
// headers of deny (Retry-After, RateLimit), retry-after-ms (the exact
// wait, rounded up to the millisecond: the jitter is Retry-After's only),
// the x-ratelimit-* headers, x-should-retry: false when the wait is past
// what the SDKs wait (maxClientRetryWait), and OpenAI's error envelope
// with code rate_limit_exceeded and type "requests" or "tokens" (the
// family of the policy that decided), or, for a money policy, code and
// type insufficient_quota. The message names the policy, its unit (a
// measure's name for a money policy) and what the request asked of it:
// its own cost, the reservation of its measure.
func denyOpenAI(w http.ResponseWriter, st *requestState, v rateLimitView) {
	h := w.Header()
	h[hdrRetryAfterMS] = []string{strconv.FormatInt(max(ceilMillis(v.retry), 1), 10)}
	if v.retry > maxClientRetryWait {
		h[hdrShouldRetry] = []string{"false"}
	}
	setSignalHeaders(h, &st.signals)
	var bp *boundPolicy // nil: stage 1 decided
	if v.policy != localPolicy {
		bp = boundNamed(st.policies, v.policy)
	}
	class := policySignalClass(st.route, bp)                                                   // signalNone (requests in flight) reads as requests
	typ, code, unit, requested := openAIRequestsType, openAIRateLimitCode, "requests", st.cost // stage 1's cost
	if bp != nil {
		requested = bp.cost(&st.reserved)
		if m := bp.measure; m >= 0 && st.route.measures[m].priced() { // money: class signalNone
			typ, code, unit = openAIQuotaType, openAIQuotaType, st.route.measures[m].name
		}
	}
	if class == signalTokens {
		typ, unit = openAITokensType, "tokens"
	}
	msg := "Rate limit reached for policy " + v.policy + " on " + unit + ": limit " + strconv.FormatInt(v.quota, 10) +
		", remaining " + strconv.FormatInt(max(v.remaining, 0), 10) + ", requested " + strconv.FormatInt(requested, 10) +
		". Please try again in " + formatReset(v.retry) + "."
	writeOpenAIError(w, http.StatusTooManyRequests, openAIErrorBody{Message: msg, Type: typ, Code: code})
}

// writeRouteProblem writes p as the request's route speaks: a 400 on a
// route with client_signals: openai in OpenAI's error envelope (type
// invalid_request_error, code the problem's error code, message its
// message), every other problem as problem+json (writeProblem).
func writeRouteProblem(w http.ResponseWriter, st *requestState, p problem) {
	if p.Status != http.StatusBadRequest || !openAISignals(st) {
		writeProblem(w, p)
		return
	}
	writeOpenAIError(w, p.Status, openAIErrorBody{Message: p.Message, Type: openAIInvalidRequest, Code: p.Error})
}

// writeOpenAIError writes b in OpenAI's envelope with status.
func writeOpenAIError(w http.ResponseWriter, status int, b openAIErrorBody) {
	body, err := json.Marshal(openAIError{Error: b})
	if err != nil { // cannot happen for this struct; never leave the client hanging
		body = []byte(`{"error":{"message":"internal error","type":"server_error","param":null,"code":"internal_error"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", openAIContentType)
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
