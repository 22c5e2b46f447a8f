package proxy

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// BreakerState is the state of an upstream's circuit breaker.
type BreakerState int

// Breaker states. The values are those of the metric
// quotagate_upstream_breaker_state.
const (
	// BreakerClosed forwards every request.
	BreakerClosed BreakerState = 0
	// BreakerHalfOpen has one probe request in flight and refuses the rest.
	BreakerHalfOpen BreakerState = 1
	// BreakerOpen refuses every request until the cooldown has passed; the
	// first request after that becomes the probe.
	BreakerOpen BreakerState = 2
)

// String returns "closed", "half_open" or "open".
func (s BreakerState) String() string {
	switch s {
	case BreakerHalfOpen:
		return "half_open"
	case BreakerOpen:
		return "open"
	}
	return "closed"
}

// BreakerOptions configures a Breaker.
type BreakerOptions struct {
	// Failures is how many consecutive failed exchanges open the breaker;
	// it must be at least 1. A failure is a connection failure, a reset, a
	// timeout before the response headers, or a response status of 500 or
	// more. An exchange the client abandoned counts neither way.
	Failures int
	// Cooldown is how long an open breaker refuses requests before it lets
	// one probe through; it must be positive.
	Cooldown time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Breaker is one upstream's circuit breaker. While closed it forwards every
// request and counts consecutive failures; Failures of them in a row open
// it. While open it answers every request at once with 503
// CodeUnavailable and a Retry-After of the time left in the cooldown
// (rounded up to whole seconds, at least 1). Once Cooldown has passed the
// next request is forwarded as the probe (half-open; the others are still
// refused): a success closes the breaker, a failure opens it for another
// Cooldown, and a probe the client abandoned lets the next request probe.
//
// Outcomes of requests admitted while closed that finish after the breaker
// opened are ignored. A Breaker is safe for concurrent use; pass the same
// one in Options.Breaker across reloads to keep its state.
type Breaker struct {
	o BreakerOptions

	mu       sync.Mutex
	state    BreakerState
	fails    int       // consecutive failures while closed
	openedAt time.Time // when the breaker last opened
}

// NewBreaker returns a closed breaker. It returns an error when Failures <
// 1 or Cooldown <= 0.
func NewBreaker(o BreakerOptions) (*Breaker, error) {
	if o.Failures < 1 {
		return nil, fmt.Errorf("proxy: breaker: failures %d: must be at least 1", o.Failures)
	}
	if o.Cooldown <= 0 {
		return nil, fmt.Errorf("proxy: breaker: cooldown %v: must be positive", o.Cooldown)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Breaker{o: o}, nil
}

// Options returns the options the breaker was built with (Now filled in).
func (b *Breaker) Options() BreakerOptions { return b.o }

// State returns the current state. An open breaker whose cooldown has
// passed still reports BreakerOpen until a request becomes the probe.
func (b *Breaker) State() BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

// admit decides whether a request may go to the upstream. probe reports
// that it is the half-open probe; when ok is false, retry is how long the
// caller should wait.
func (b *Breaker) admit() (probe bool, retry time.Duration, ok bool) {
	now := b.o.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerClosed:
		return false, 0, true
	case BreakerOpen:
		left := b.o.Cooldown - now.Sub(b.openedAt)
		if left <= 0 {
			b.state = BreakerHalfOpen
			return true, 0, true
		}
		return false, left, false
	}
	// Half-open: the probe is in flight; others wait for about its answer.
	return false, b.o.Cooldown, false
}

// outcome is what an exchange told about the upstream's health.
type outcome int

const (
	outcomeNone    outcome = iota // no exchange, or the client left
	outcomeSuccess                // a response with status < 500
	outcomeFailure                // no response, or status >= 500
)

// done records the outcome of a request admit let through.
func (b *Breaker) done(probe bool, out outcome) {
	now := b.o.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		switch out {
		case outcomeSuccess:
			b.state, b.fails = BreakerClosed, 0
		case outcomeFailure:
			b.state, b.openedAt = BreakerOpen, now
		default:
			// Nobody learned anything: let the next request probe at once.
			b.state = BreakerOpen
		}
		return
	}
	if b.state != BreakerClosed {
		return
	}
	switch out {
	case outcomeSuccess:
		b.fails = 0
	case outcomeFailure:
		b.fails++
		if b.fails >= b.o.Failures {
			b.state, b.openedAt, b.fails = BreakerOpen, now, 0
		}
	}
}

// breakerTicket carries the outcome of one admitted request from the
// transport back to the handler.
type breakerTicket struct {
	out outcome
}

type ticketKey struct{}

// breakerHandler refuses requests while the breaker is open and records the
// outcome of those it forwards.
type breakerHandler struct {
	b     *Breaker
	next  http.Handler
	write func(w http.ResponseWriter, r *http.Request, status int, code, message string)
}

func (h *breakerHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	probe, retry, ok := h.b.admit()
	if !ok {
		w.Header().Set("Retry-After", strconv.FormatInt(retryAfterSeconds(retry), 10))
		h.write(w, r, http.StatusServiceUnavailable, CodeUnavailable, "the upstream service is failing; try again later")
		return
	}
	t := &breakerTicket{}
	defer func() { h.b.done(probe, t.out) }()
	h.next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ticketKey{}, t)))
}

// retryAfterSeconds rounds d up to whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

// outcomeTransport records in the request's breakerTicket (if any) how the
// exchange went, and in its shedTicket (if any) the time to response
// headers of an exchange that got a response.
type outcomeTransport struct {
	next http.RoundTripper
}

func (t *outcomeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	st, _ := req.Context().Value(shedKey{}).(*shedTicket)
	var start time.Time
	if st != nil {
		start = st.now()
	}
	resp, err := t.next.RoundTrip(req)
	if st != nil && err == nil {
		st.latency, st.measured = st.now().Sub(start), true
	}
	if tk, ok := req.Context().Value(ticketKey{}).(*breakerTicket); ok {
		switch {
		case err != nil && req.Context().Err() != nil:
			tk.out = outcomeNone // the client left; the upstream is not to blame
		case err != nil || resp.StatusCode >= http.StatusInternalServerError:
			tk.out = outcomeFailure
		default:
			tk.out = outcomeSuccess
		}
	}
	return resp, err
}
