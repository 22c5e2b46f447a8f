package rls

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"
)

// maxCheckBody bounds a /v1/check request body.
const maxCheckBody = 64 << 10

// checkReadTimeout bounds the read of a /v1/check request, headers and
// body: a client that sends its body slowly, or stops halfway, would hold
// its connection (and a stop's drain) for as long as it likes.
const checkReadTimeout = 10 * time.Second

// checkRequest is the JSON body of POST /v1/check.
type checkBody struct {
	Domain      string    `json:"domain"`
	Descriptors [][]Entry `json:"descriptors"`
	// Hits is the cost of every descriptor; absent or 0 means 1.
	Hits uint64 `json:"hits"`
	// DryRun reports the decision without consuming anything.
	DryRun bool `json:"dry_run"`
}

// checkResponse is the JSON answer of POST /v1/check.
type checkResponse struct {
	Overall      string        `json:"overall"`
	Statuses     []checkStatus `json:"statuses"`
	RetryAfterMS int64         `json:"retry_after_ms"`
	DryRun       bool          `json:"dry_run,omitempty"`
	// Fallback is the on_store_error mode that decided, when the store
	// could not.
	Fallback string `json:"fallback,omitempty"`
}

type checkStatus struct {
	Code string `json:"code"`
	// Limit is absent when no rule matched (and null for unlimited).
	Limit *checkLimit `json:"limit,omitempty"`
	// Remaining is the units left after the decision.
	Remaining    uint32 `json:"remaining"`
	ResetAfterMS int64  `json:"reset_after_ms"`
	// Shadow reports a shadow or quota rule that was over.
	Shadow bool `json:"shadow_over_limit,omitempty"`
}

type checkLimit struct {
	Name            string `json:"name,omitempty"`
	Policy          string `json:"policy"`
	RequestsPerUnit uint32 `json:"requests_per_unit"`
	Unit            string `json:"unit"`
	Unlimited       bool   `json:"unlimited,omitempty"`
}

type checkError struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// CheckHandler serves POST /v1/check on e:
//
//	{"domain": "edge", "descriptors": [[{"key": "k", "value": "v"}]], "hits": 1, "dry_run": false}
//
// answers 200 with {"overall": "OK"|"OVER_LIMIT", "statuses": [...],
// "retry_after_ms": N} whatever the decision (with headers, the draft-10
// RateLimit and RateLimit-Policy headers too), 400 for a malformed request
// (unknown fields included), 405 for another method, 408 for a request
// not read within 10 seconds (the server's ReadTimeout), 413 for a body over
// 64 KiB, and 503 (Retry-After: Options.RetryAfter, in whole seconds)
// when the store cannot decide and on_store_error is unavailable. Errors
// are {"error": code, "message": text}.
func CheckHandler(e *Engine, headers bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeJSON(w, http.StatusMethodNotAllowed, checkError{"method_not_allowed", "use POST"})
			return
		}
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxCheckBody))
		dec.DisallowUnknownFields()
		var body checkBody
		if err := dec.Decode(&body); err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				writeJSON(w, http.StatusRequestEntityTooLarge, checkError{"too_large", "the body exceeds 64 KiB"})
				return
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				writeJSON(w, http.StatusRequestTimeout, checkError{"request_timeout", "the body did not arrive in time"})
				return
			}
			writeJSON(w, http.StatusBadRequest, checkError{"bad_request", "malformed JSON: " + err.Error()})
			return
		}
		if _, err := dec.Token(); err != io.EOF {
			writeJSON(w, http.StatusBadRequest, checkError{"bad_request", "the body must hold one JSON object"})
			return
		}
		if err := checkCounts(len(body.Descriptors), func(i int) int { return len(body.Descriptors[i]) }); err != nil {
			writeJSON(w, http.StatusBadRequest, checkError{"bad_request", err.Error()})
			return
		}
		req := Request{Domain: body.Domain, Hits: body.Hits, DryRun: body.DryRun, Descriptors: make([]Descriptor, len(body.Descriptors))}
		for i, es := range body.Descriptors {
			req.Descriptors[i].Entries = es
		}
		resp, err := e.Decide(r.Context(), &req)
		switch {
		case errors.Is(err, ErrBadRequest):
			writeJSON(w, http.StatusBadRequest, checkError{"bad_request", err.Error()})
			return
		case err != nil:
			w.Header().Set("Retry-After", strconv.FormatInt(int64(ceilSecond(e.opts.RetryAfter)/time.Second), 10))
			writeJSON(w, http.StatusServiceUnavailable, checkError{"unavailable", "the store cannot decide now"})
			return
		}
		out := checkResponse{Overall: resp.Overall.String(), Statuses: make([]checkStatus, len(resp.Statuses)),
			RetryAfterMS: ceilMS(resp.RetryAfter), DryRun: body.DryRun, Fallback: resp.Fallback}
		for i := range resp.Statuses {
			st := &resp.Statuses[i]
			cs := checkStatus{Code: st.Code.String(), Remaining: st.Remaining, ResetAfterMS: ceilMS(st.ResetAfter), Shadow: st.ShadowOver}
			if rl := st.Rule; rl != nil {
				cs.Limit = &checkLimit{Name: rl.Name, Policy: rl.Path, RequestsPerUnit: rl.RequestsPerUnit, Unit: rl.Unit.String(), Unlimited: rl.Unlimited}
				if rl.Unlimited {
					cs.Limit.Unit = ""
				}
			}
			out.Statuses[i] = cs
		}
		if headers {
			if name, policy, limit := Headers(resp); name != "" {
				w.Header().Set("RateLimit-Policy", policy)
				w.Header().Set("RateLimit", limit)
			}
		}
		writeJSON(w, http.StatusOK, out)
	})
}

func ceilMS(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // the types above always marshal
		code, b = http.StatusInternalServerError, []byte(`{"error":"internal"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}
