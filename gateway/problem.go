package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Error codes carried in the "error" member of every problem body. They are
// part of the HTTP contract: clients match on them.
const (
	codeRateLimited         = "rate_limited"
	codeLimiterUnavailable  = "limiter_unavailable"
	codeUnauthenticated     = "unauthenticated"
	codeNoRoute             = "no_route"
	codeUpstreamUnavailable = "upstream_unavailable"
	codeUpstreamTimeout     = "upstream_timeout"
	codeOverloaded          = "overloaded"
	codePayloadTooLarge     = "payload_too_large"
	codeBadRequest          = "bad_request"
	codeBodyTimeout         = "request_timeout"
	codeMethodNotAllowed    = "method_not_allowed"
	codeInternal            = "internal_error"
	codeForbidden           = "forbidden"
	codeMisdirected         = "misdirected_request"
)

// problemTitles gives the RFC 9457 title of each code.
var problemTitles = map[string]string{
	codeRateLimited:         "Too Many Requests",
	codeLimiterUnavailable:  "Rate Limiter Unavailable",
	codeUnauthenticated:     "Unauthenticated",
	codeNoRoute:             "No Route",
	codeUpstreamUnavailable: "Upstream Unavailable",
	codeUpstreamTimeout:     "Upstream Timeout",
	codeOverloaded:          "Upstream Overloaded",
	codePayloadTooLarge:     "Payload Too Large",
	codeBadRequest:          "Bad Request",
	codeBodyTimeout:         "Request Timeout",
	codeMethodNotAllowed:    "Method Not Allowed",
	codeInternal:            "Internal Error",
	codeForbidden:           "Forbidden",
	codeMisdirected:         "Misdirected Request",
}

// problem is an application/problem+json body (RFC 9457) with the members
// the contract adds. Optional members are omitted when empty.
type problem struct {
	Type      string   `json:"type"`
	Title     string   `json:"title"`
	Status    int      `json:"status"`
	Error     string   `json:"error"`
	Message   string   `json:"message"`
	RequestID string   `json:"request_id"`
	Policy    string   `json:"policy,omitempty"`
	Violated  []string `json:"violated-policies,omitempty"`
	RetryMS   *int64   `json:"retry_after_ms,omitempty"`
	JitterMS  *int64   `json:"retry_jitter_ms,omitempty"`
}

// writeProblem writes p with its status. The type URI is a stable URN per
// error code; title defaults from the code.
func writeProblem(w http.ResponseWriter, p problem) {
	if p.Title == "" {
		p.Title = problemTitles[p.Error]
	}
	p.Type = "urn:quotagate:problem:" + p.Error
	body, err := json.Marshal(p)
	if err != nil { // cannot happen for this struct; never leave the client hanging
		body = []byte(`{"error":"internal_error"}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}
