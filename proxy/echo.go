package proxy

import (
	"encoding/json"
	"net/http"
)

// echoHandler is the built-in upstream of the scheme "echo": it answers
// every request with 200 and a JSON description of it, without any network.
type echoHandler struct{}

// echoBody is the JSON object echoHandler answers with.
type echoBody struct {
	Method    string `json:"method"`
	Path      string `json:"path"`
	RequestID string `json:"request_id"`
	Tenant    string `json:"tenant"`
}

func (echoHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Marshaling a struct of strings cannot fail (invalid UTF-8 is replaced).
	body, _ := json.Marshal(echoBody{
		Method:    r.Method,
		Path:      r.URL.Path,
		RequestID: r.Header.Get("X-Request-Id"),
		Tenant:    r.Header.Get("X-Quotagate-Tenant"),
	})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(append(body, '\n'))
}
