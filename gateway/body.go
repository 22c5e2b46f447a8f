package gateway

import (
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/quotagate/quotagate/telemetry"
)

// bodyFault is how reading a caller's request body failed, by the caller's
// doing. Any fault but bodyOK means the caller broke the exchange: the
// request is answered with the fault's status (see problem), and a
// reservation it holds stands (see keepsReservation), since the upstream
// may already have acted on the part of the body it received.
type bodyFault uint8

const (
	bodyOK bodyFault = iota
	// bodyTooLarge: the body ran past server.max_body_bytes (413).
	bodyTooLarge
	// bodyMalformed: the body's framing broke (a malformed chunk, a
	// connection cut before Content-Length bytes) (400).
	bodyMalformed
	// bodyIdle: no byte of the body arrived for server.body_read_timeout
	// (408).
	bodyIdle
	// bodySlow: the body arrived slower than server.body_min_rate (408).
	bodySlow
	// bodyCutOff: the exchange with the upstream ended (its timeout
	// passed) while the gateway still waited for the caller's body (408).
	bodyCutOff
)

// timedOut reports whether f is one of the deadlines of a body (408).
func (f bodyFault) timedOut() bool { return f == bodyIdle || f == bodySlow || f == bodyCutOff }

// reason is the fault's label in quotagate_body_timeouts_total and logs.
func (f bodyFault) reason() string {
	switch f {
	case bodyTooLarge:
		return "too_large"
	case bodyMalformed:
		return "malformed"
	case bodyIdle:
		return telemetry.BodyIdle
	case bodySlow:
		return telemetry.BodyMinRate
	case bodyCutOff:
		return telemetry.BodyUpstreamTimeout
	}
	return ""
}

// problem is the answer to a request whose body failed with f; ok is
// false for bodyOK. maxBody, when positive, is named in a 413's message.
func (f bodyFault) problem(requestID string, maxBody int64) (p problem, ok bool) {
	switch f {
	case bodyTooLarge:
		msg := "request body too large"
		if maxBody > 0 {
			msg = "request body exceeds " + strconv.FormatInt(maxBody, 10) + " bytes"
		}
		return problem{Status: http.StatusRequestEntityTooLarge, Error: codePayloadTooLarge, Message: msg, RequestID: requestID}, true
	case bodyMalformed:
		return problem{Status: http.StatusBadRequest, Error: codeBadRequest,
			Message: "the request body could not be read", RequestID: requestID}, true
	case bodyIdle:
		return problem{Status: http.StatusRequestTimeout, Error: codeBodyTimeout,
			Message: "no byte of the request body arrived within server.body_read_timeout", RequestID: requestID}, true
	case bodySlow:
		return problem{Status: http.StatusRequestTimeout, Error: codeBodyTimeout,
			Message: "the request body arrived slower than server.body_min_rate", RequestID: requestID}, true
	case bodyCutOff:
		return problem{Status: http.StatusRequestTimeout, Error: codeBodyTimeout,
			Message: "the request body did not arrive within the upstream's timeout", RequestID: requestID}, true
	}
	return problem{}, false
}

// errBodyTooLarge is the error of a read past server.max_body_bytes; the
// proxy sees an *http.MaxBytesError.
var errBodyTooLarge = &http.MaxBytesError{}

// errBodyTimeout is the error of a read that a body deadline ended.
var errBodyTimeout = errors.New("gateway: the request body did not arrive in time")

// bodyLimits are the limits every request body is read under
// (server.max_body_bytes, body_read_timeout, body_min_rate).
type bodyLimits struct {
	max     int64
	timeout time.Duration
	minRate int64 // bytes per second; 0 = none
}

// requestBody is a caller's request body as every stage reads it (the cost
// stage, to find a reservation; the transport, to send it upstream). It
//
//   - stops at the limits' max: a body of exactly max is whole, since
//     every read asks for one byte more than is left, so its end shows as
//     io.EOF and a longer body as that extra byte, which is never
//     returned: the read fails with errBodyTooLarge instead, the
//     transport abandons the upstream request mid-body, and the upstream
//     never receives a complete request;
//   - sets the connection's read deadline before each read to the
//     earlier of now + timeout (the wait for the next bytes) and the time
//     at which the bytes read so far fall below minRate, counted from the
//     first read after a grace of one timeout, so a read that brings
//     nothing in time fails with errBodyTimeout;
//   - can be cut off by AbortRead from another goroutine while a read
//     waits (the proxy does when the upstream's timeout passes): the
//     read's deadline is moved to the past, so the transport, which waits
//     for its body reader before it gives up an exchange, is not held by
//     a caller that sends nothing;
//   - records the first fault in the request's state.
//
// ctl is nil on a writer without deadlines (HTTP/1 and HTTP/2 servers have
// them; see newRequestBody): then only max applies.
type requestBody struct {
	rc     io.ReadCloser
	st     *requestState
	limits bodyLimits
	left   int64
	ctl    *http.ResponseController
	start  time.Time // of the first read
	read   int64
	// state moves from idle to reading for each read, back to idle after
	// it, and to done at the body's end or first failure; AbortRead moves
	// it to cut.
	state atomic.Int32
}

// newRequestBody returns r's body under l, recording its faults in st; w
// is the request's writer, whose connection's read deadline it sets (nil:
// no deadlines, only the size limit).
func newRequestBody(w http.ResponseWriter, r *http.Request, st *requestState, l bodyLimits) *requestBody {
	b := &requestBody{rc: r.Body, st: st, limits: l, left: l.max}
	if w != nil && l.timeout > 0 {
		ctl := http.NewResponseController(w)
		// A zero deadline is what the server left (it has no ReadTimeout);
		// an error says the writer keeps none.
		if ctl.SetReadDeadline(time.Time{}) == nil {
			b.ctl = ctl
		}
	}
	return b
}

const (
	bodyIdleState int32 = iota
	bodyReading
	bodyCut
	bodyDone
)

// longAgo is a deadline in the past: a read waiting under it returns at
// once.
var longAgo = time.Unix(1, 0)

func (b *requestBody) Read(p []byte) (int, error) {
	if f := b.st.bodyFault.load(); f != bodyOK {
		return 0, faultError(f)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !b.state.CompareAndSwap(bodyIdleState, bodyReading) {
		if b.state.Load() == bodyDone {
			return 0, io.EOF // read to its end before
		}
		return 0, faultError(b.fail(bodyCutOff))
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	deadline, slowAt := b.deadline()
	n, err := b.rc.Read(p)
	b.read += int64(n)
	if !b.state.CompareAndSwap(bodyReading, bodyIdleState) {
		// Cut off while it read: whatever it brought, the exchange it was
		// read for is over.
		return 0, faultError(b.fail(bodyCutOff))
	}
	if int64(n) > b.left {
		return 0, faultError(b.fail(bodyTooLarge))
	}
	b.left -= int64(n)
	switch {
	case err == nil:
	case err == io.EOF:
		b.state.Store(bodyDone)
	case errors.Is(err, os.ErrDeadlineExceeded) && !deadline.IsZero():
		f := bodyIdle
		if !slowAt.IsZero() && !slowAt.After(deadline) {
			f = bodySlow
		}
		return n, faultError(b.fail(f))
	default:
		b.fail(bodyMalformed)
	}
	return n, err
}

// deadline sets the connection's read deadline for the next read and
// returns it (zero when the writer has none), with the time the rate
// falls below minRate (zero without a minimum).
func (b *requestBody) deadline() (deadline, slowAt time.Time) {
	if b.ctl == nil || b.limits.timeout <= 0 {
		return time.Time{}, time.Time{}
	}
	now := time.Now()
	if b.start.IsZero() {
		b.start = now
	}
	deadline = now.Add(b.limits.timeout)
	if r := b.limits.minRate; r > 0 {
		// read/r seconds of transfer are owed by start + timeout; read is
		// below max_body_bytes, so the product stays far from overflow.
		owed := time.Duration(float64(b.read) / float64(r) * float64(time.Second))
		slowAt = b.start.Add(b.limits.timeout + owed)
		if slowAt.Before(deadline) {
			deadline = slowAt
		}
	}
	_ = b.ctl.SetReadDeadline(deadline)
	return deadline, slowAt
}

// fail records f as the body's fault unless one is already recorded, ends
// the body, and returns the recorded fault.
func (b *requestBody) fail(f bodyFault) bodyFault {
	b.state.Store(bodyDone)
	return b.st.bodyFault.record(f)
}

// faultBox holds a request's first bodyFault. The transport reads the body
// on a goroutine of its own, so it is atomic.
type faultBox struct{ v atomic.Uint32 }

// load returns the recorded fault, bodyOK when none.
func (f *faultBox) load() bodyFault { return bodyFault(f.v.Load()) }

// record stores fault unless one is already recorded, and returns the
// recorded one.
func (f *faultBox) record(fault bodyFault) bodyFault {
	if f.v.CompareAndSwap(uint32(bodyOK), uint32(fault)) {
		return fault
	}
	return f.load()
}

func faultError(f bodyFault) error {
	switch f {
	case bodyTooLarge:
		return errBodyTooLarge
	case bodyMalformed:
		return errBodyMalformed
	}
	return errBodyTimeout
}

// errBodyMalformed is returned by reads after the body's framing broke.
var errBodyMalformed = errors.New("gateway: the request body could not be read")

// AbortRead ends the body (proxy.ReadAborter): a read waiting for the
// caller returns at once, its deadline moved to the past, and it and every
// later read fail as cut off (bodyCutOff), since the exchange they would
// be read for is over. A body read to its end, or failed, stays as it is.
// It does not block.
func (b *requestBody) AbortRead() {
	if b.state.CompareAndSwap(bodyReading, bodyCut) {
		if b.ctl != nil {
			_ = b.ctl.SetReadDeadline(longAgo)
		}
		return
	}
	// Between two reads the exchange waits for the upstream, not the
	// caller: a later read fails as cut off, but unless one comes the
	// failure is the upstream's.
	b.state.CompareAndSwap(bodyIdleState, bodyCut)
}

// answerStarted is called when the answer to the request starts (its
// status is written). Nothing reads the body after that but net/http's
// server itself, which, before it writes the headers of an answer given
// without reading the whole body, reads up to 256 KiB of what is left to
// keep the connection; with no deadline on the connection that read waits
// for as long as the caller stalls, and the answer, a refusal written
// before the body was read among them, is never sent. So, unless a read of
// the body is under way (it keeps the deadline it set, at most the body's
// timeout away), the read deadline is moved to the past: what has already
// arrived is still drained, and a body that has not is not waited for —
// the connection is closed after the answer. A later read of the body by
// the gateway sets a deadline of its own. It does not block.
func (b *requestBody) answerStarted() {
	if b.ctl != nil && b.state.Load() == bodyIdleState {
		_ = b.ctl.SetReadDeadline(longAgo)
	}
}

// Close closes the caller's body.
func (b *requestBody) Close() error { return b.rc.Close() }
