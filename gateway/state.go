package gateway

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"time"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/identity"
)

// requestState is what the stages of the pipeline learn about one request.
// The outermost stage creates it and stores one pointer in the request's
// context; each later stage reads and fills its own fields, so a request
// costs one context value, not one per stage.
type requestState struct {
	start     time.Time
	requestID string
	caller    identity.Caller
	route     *route // nil until the route stage matched
	policies  []boundPolicy
	limit     rateLimitView // what the RateLimit headers describe
	// signals is what the x-ratelimit-* headers describe on a route with
	// client_signals: openai; zero on other routes.
	signals clientSignals
	// cost is the units the request takes from stage 1: the route's fixed
	// cost, or the reservation of its cost block (see costStage).
	cost int64
	// reserved holds the reservation of each measure of the route, by
	// its index in route.measures (see costStage).
	reserved [config.MaxMeasures]int64
	// value is the index of the request's value of its route's dimension,
	// or usage.Other (see costStage).
	value int
	// settle is the request's reservation waiting to be settled from the
	// response; nil when nothing is to be settled.
	settle *pendingSettle
	// bodyFault is the first fault of reading the caller's body, if any
	// (see requestBody).
	bodyFault faultBox
	// bodyHeld is the bytes of the body the cost stage holds in memory,
	// taken from the gateway's body buffer budget and given back when the
	// request ends.
	bodyHeld int64
	// peerTrusted is set by the identity stage when the TCP peer is one of
	// server.trusted_proxies, whose forwarding headers are then believed.
	peerTrusted bool
	rec         statusRecorder
	// hdr backs the one-value header slices the gateway sets for this
	// request (see headerValues), so that they cost no allocation of
	// their own.
	hdr headerValues
}

// headerValues holds the values of the headers the gateway sets, for the
// request's lifetime. Each header's slice is a one-element window of
// capacity one on its array, so an Add to one header copies the values
// rather than writing into another's.
type headerValues struct {
	requestID [2]string // X-Request-Id of the request and of the response
	rateLimit [2]string // RateLimit-Policy and RateLimit
	tenant    [1]string // X-Quotagate-Tenant of the request
}

type stateKey struct{}

// stateFrom returns the request's state; nil outside the pipeline.
func stateFrom(ctx context.Context) *requestState {
	st, _ := ctx.Value(stateKey{}).(*requestState)
	return st
}

// statusRecorder remembers the status written through it, for metrics and
// logs. It unwraps to the original writer, so http.ResponseController (which
// the reverse proxy uses to flush) reaches the connection.
type statusRecorder struct {
	http.ResponseWriter
	status  int
	written int64
	// body is the request's body when it has one (nil otherwise): once the
	// answer starts, what is left of it is no longer waited for (see
	// requestBody.answerStarted).
	body *requestBody
}

// started records status as the answer's, the first time an answer starts.
func (s *statusRecorder) started(status int) {
	if s.status == 0 {
		s.status = status
		if s.body != nil {
			s.body.answerStarted()
		}
	}
}

func (s *statusRecorder) WriteHeader(code int) {
	s.started(code)
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	s.started(http.StatusOK)
	n, err := s.ResponseWriter.Write(b)
	s.written += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController find Flush, Hijack and deadlines.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Hijack hands the connection over. In the pipeline only the reverse proxy
// hijacks, and only to relay an upstream's 101 Switching Protocols (a
// permitted WebSocket handshake) before it tunnels the connection, so a
// successful hijack records 101: the request's metric and access line are
// written when the tunnel closes, with that status.
func (s *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(s.ResponseWriter).Hijack()
	if err == nil && s.status == 0 {
		s.status = http.StatusSwitchingProtocols // the tunnel reads the connection itself
	}
	return conn, brw, err
}

// Flush forwards to the underlying writer when it can flush.
func (s *statusRecorder) Flush() {
	s.started(http.StatusOK)
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
