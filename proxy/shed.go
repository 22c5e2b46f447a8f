package proxy

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// CodeOverloaded is passed to Observer.Error, with 503, for a request
// the Shedder refused.
const CodeOverloaded = "overloaded"

// ShedderOptions configures a Shedder.
type ShedderOptions struct {
	// TargetLatency is the time to response headers the upstream should
	// keep to; must be positive.
	TargetLatency time.Duration
	// Priority lists tiers, most important first. A tier not listed ranks
	// below all of them.
	Priority []string
	// MinInflight is the least the limit falls to (>= 1); MaxInflight the
	// most it rises to and where it starts (>= MinInflight).
	MinInflight, MaxInflight int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Shedder keeps an adaptive limit on the requests in flight to one
// upstream and, once the upstream is saturated, refuses the lowest tiers
// first.
//
// The controller is AIMD on the latency to response headers. The limit
// starts at MaxInflight. Each exchange that got its headers within
// TargetLatency adds 1 (up to MaxInflight). An exchange slower than the
// target cuts the limit to min(limit, in flight) × max(0.5,
// target/latency), at least MinInflight, at most once per TargetLatency
// (the responses of one slow burst come back together and are one
// signal). Failed exchanges and those the client abandoned do not move
// the limit; that is the breaker's business.
//
// Admission: while the limit is MaxInflight the upstream is healthy and
// every request is admitted up to MaxInflight in flight. Below it, a
// request whose tier has rank r (0 for Priority[0], len(Priority) for a
// tier not listed) is admitted while in flight < max(1, ⌊limit × (1 −
// r/(len(Priority)+1))⌋): the first tier may use the whole limit, each
// lower one a smaller share, so the lowest are refused first and the
// first last. A refused request gets 503 CodeOverloaded with a
// Retry-After of max(1 s, TargetLatency) rounded up to seconds.
//
// A Shedder is safe for concurrent use.
type Shedder struct {
	o    ShedderOptions
	rank map[string]int

	mu       sync.Mutex
	limit    float64
	inflight int
	lastCut  time.Time
}

// NewShedder returns a shedder at its healthy limit, or an error for
// invalid options (the field and the problem).
func NewShedder(o ShedderOptions) (*Shedder, error) {
	switch {
	case o.TargetLatency <= 0:
		return nil, fmt.Errorf("proxy: shedder: target latency %v: must be positive", o.TargetLatency)
	case o.MinInflight < 1:
		return nil, fmt.Errorf("proxy: shedder: min in flight %d: must be at least 1", o.MinInflight)
	case o.MaxInflight < o.MinInflight:
		return nil, fmt.Errorf("proxy: shedder: max in flight %d: must be at least min in flight %d", o.MaxInflight, o.MinInflight)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Shedder{o: o, rank: make(map[string]int, len(o.Priority)), limit: float64(o.MaxInflight)}
	for i, t := range o.Priority {
		if _, dup := s.rank[t]; !dup {
			s.rank[t] = i
		}
	}
	return s, nil
}

// Options returns the options the shedder was built with (Now filled in).
func (s *Shedder) Options() ShedderOptions { return s.o }

// Limit returns the current limit and the requests in flight.
func (s *Shedder) Limit() (limit float64, inflight int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limit, s.inflight
}

// allowed returns the most requests in flight under which a request of
// tier is admitted, for the current limit. s.mu must be held.
func (s *Shedder) allowed(tier string) int {
	if s.limit >= float64(s.o.MaxInflight) {
		return s.o.MaxInflight
	}
	r, ok := s.rank[tier]
	if !ok {
		r = len(s.o.Priority)
	}
	share := 1 - float64(r)/float64(len(s.o.Priority)+1)
	return max(1, int(math.Floor(s.limit*share+1e-9))) // 1e-9: 10/3 × 0.6 is 2
}

// admit takes a place in flight for a request of tier, or reports that it
// must be shed.
func (s *Shedder) admit(tier string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inflight >= s.allowed(tier) {
		return false
	}
	s.inflight++
	return true
}

// done gives back a place taken by admit; latency is the time to response
// headers when measured is true.
func (s *Shedder) done(latency time.Duration, measured bool) {
	now := s.o.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight--
	if !measured {
		return
	}
	s.observe(now, latency)
}

// observe moves the limit for one exchange's latency. s.mu must be held.
func (s *Shedder) observe(now time.Time, latency time.Duration) {
	target := s.o.TargetLatency
	if latency <= target {
		s.limit = min(float64(s.o.MaxInflight), s.limit+1)
		return
	}
	if !s.lastCut.IsZero() && now.Sub(s.lastCut) < target {
		return
	}
	s.lastCut = now
	factor := max(0.5, float64(target)/float64(latency))
	base := min(s.limit, float64(s.inflight+1)) // +1: the exchange just finished was in flight
	s.limit = max(float64(s.o.MinInflight), base*factor)
}

// shedTicket carries the time to response headers from the transport back
// to the handler.
type shedTicket struct {
	now      func() time.Time
	latency  time.Duration
	measured bool
}

type shedKey struct{}

func withShedTicket(ctx context.Context, t *shedTicket) context.Context {
	return context.WithValue(ctx, shedKey{}, t)
}

// shedHandler refuses requests over the shedder's share for their tier
// and feeds the controller with the latency of the others.
type shedHandler struct {
	s      *Shedder
	next   http.Handler
	tier   func(*http.Request) string
	onShed func(r *http.Request, tier string)
	write  func(w http.ResponseWriter, r *http.Request, status int, code, message string)
}

func (h *shedHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tier := ""
	if h.tier != nil {
		tier = h.tier(r)
	}
	if !h.s.admit(tier) {
		if h.onShed != nil {
			h.onShed(r, tier)
		}
		w.Header().Set("Retry-After", strconv.FormatInt(retryAfterSeconds(h.s.o.TargetLatency), 10))
		h.write(w, r, http.StatusServiceUnavailable, CodeOverloaded, "the upstream service is overloaded; try again later")
		return
	}
	t := &shedTicket{now: h.s.o.Now}
	defer func() { h.s.done(t.latency, t.measured) }()
	h.next.ServeHTTP(w, r.WithContext(withShedTicket(r.Context(), t)))
}
