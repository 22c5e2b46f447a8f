package gateway

import (
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// rateLimitView is what the RateLimit-Policy and RateLimit headers describe:
// the one policy that decided the request (the denying policy with the
// longest wait, or, when allowed, the policy with the least left).
type rateLimitView struct {
	policy    string
	quota     int64         // q: units of the quota
	window    int64         // w: seconds of the quota's window; 0 for a concurrency policy, which has none
	remaining int64         // r: units left
	reset     time.Duration // t: until the quota is back in full (allowed) or usable again (denied)
	retry     time.Duration // exact wait before the request's cost fits; 0 when allowed
}

// setRateLimitHeaders writes RateLimit-Policy and RateLimit (spelled in Go's
// canonical form and stored directly, which spares a canonicalization per
// request; header names are case-insensitive) in the syntax of
// draft-ietf-httpapi-ratelimit-headers-10 (Structured Field lists). Times
// are delta seconds, never timestamps.
//
// Both values are formatted into one string, and the two header slices
// are windows of capacity one on vals (the request state's, so that they
// allocate nothing; an Add to either header copies it rather than
// overwriting the other): one allocation per response, whatever the
// numbers.
func setRateLimitHeaders(h http.Header, v rateLimitView, vals *[2]string) {
	if v.policy == "" {
		return
	}
	var buf [128]byte
	b := appendSFString(buf[:0], v.policy)
	name := len(b)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, v.quota, 10)
	if v.window != 0 { // requests in flight have no window and no reset
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, v.window, 10)
	}
	policyEnd := len(b)
	b = append(b, b[:name]...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, max(v.remaining, 0), 10)
	if v.window != 0 {
		t := int64(0)
		if v.reset > 0 {
			t = ceilSeconds(v.reset)
		}
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, t, 10)
	}
	s := string(b)
	vals[0], vals[1] = s[:policyEnd], s[policyEnd:]
	h["Ratelimit-Policy"] = vals[0:1:1]
	h["Ratelimit"] = vals[1:2:2]
}

// appendSFString appends s as a Structured Field string: s in double quotes
// or, when s holds '"' or '\', s less its characters outside printable
// ASCII, quoted and escaped by strconv.Quote.
func appendSFString(b []byte, s string) []byte {
	if !hasQuoteOrBackslash(s) {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	return strconv.AppendQuote(b, strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return -1
		}
		return r
	}, s))
}

// hasQuoteOrBackslash reports whether s holds '"' or '\\': what
// strings.ContainsAny(s, `"\`) reports, in a plain loop over the bytes
// (ContainsAny costs several times more for a short policy name).
func hasQuoteOrBackslash(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			return true
		}
	}
	return false
}

// retryJitter returns the random extra delay added to a denial's wait so
// that callers denied together do not come back together: uniform in
// [0, J) where J is a quarter of the wait, at least 1 s and at most 10 s.
// With at least 1 s of spread, the whole-second Retry-After values of
// concurrent denials differ even when the exact wait is short.
func retryJitter(wait time.Duration) time.Duration {
	j := wait / 4
	j = max(j, time.Second)
	j = min(j, 10*time.Second)
	return time.Duration(rand.Int64N(int64(j)))
}

// ceilMillis rounds d up to whole milliseconds.
func ceilMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// deny answers 429. Retry-After is whole seconds, at least 1, and never
// earlier than the exact wait: ceil(wait + jitter).
func (g *Gateway) deny(w http.ResponseWriter, st *requestState, v rateLimitView, violated []string) {
	jitter := retryJitter(v.retry)
	h := w.Header()
	h.Set("Retry-After", strconv.FormatInt(ceilSeconds(v.retry+jitter), 10))
	setRateLimitHeaders(h, v, &st.hdr.rateLimit)
	if openAISignals(st) {
		denyOpenAI(w, st, v)
		return
	}
	retryMS, jitterMS := ceilMillis(v.retry), int64(jitter/time.Millisecond)
	writeProblem(w, problem{
		Status:    http.StatusTooManyRequests,
		Error:     codeRateLimited,
		Message:   "rate limit exceeded for policy " + v.policy,
		RequestID: st.requestID,
		Policy:    v.policy,
		Violated:  violated,
		RetryMS:   &retryMS,
		JitterMS:  &jitterMS,
	})
}

// unavailable answers 503 for a policy that fails closed while the store
// cannot decide.
func (g *Gateway) unavailable(w http.ResponseWriter, st *requestState, policy string, retry time.Duration) {
	w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(retry), 10))
	writeProblem(w, problem{
		Status:    http.StatusServiceUnavailable,
		Error:     codeLimiterUnavailable,
		Message:   "the rate limiter cannot decide for policy " + policy + " right now",
		RequestID: st.requestID,
		Policy:    policy,
	})
}

// writeProxyError is upstreamObserver.Error: 502 and 504 as problem+json,
// or 413 when the failure was the request body running past its limit.
func writeProxyError(w http.ResponseWriter, r *http.Request, status int, code, message string) {
	st := stateFrom(r.Context())
	id := ""
	if st != nil {
		id = st.requestID
		// A body fault is the caller's doing whatever the proxy made of
		// it; a deadline's wins over "client closed", since net/http
		// cancels the request's context when a read of its connection
		// times out, and the caller is still there to be told.
		if f := st.bodyFault.load(); f.timedOut() || f != bodyOK && status != 499 {
			pr, _ := f.problem(id, 0)
			writeRouteProblem(w, st, pr)
			return
		}
	}
	if status == 499 { // the client went away; there is nobody to answer
		if st != nil {
			st.rec.status = 499
		}
		return
	}
	writeProblem(w, problem{Status: status, Error: code, Message: message, RequestID: id})
}
