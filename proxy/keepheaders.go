package proxy

import "net/http"

// ownHeadersWriter is the ResponseWriter the ReverseProxy gets. After it
// has written an upstream's 1xx, the ReverseProxy clears the response
// headers (so that the 1xx's own, such as Link, do not stay for the final
// response), and with them the headers the handler's caller set before
// forwarding (the gateway's X-Request-Id and RateLimit headers). The
// writer puts those back, ahead of any value of the same name, before the
// next header it writes: what the headers would have been without the
// 1xx. Responses without a 1xx pass through unchanged.
type ownHeadersWriter struct {
	http.ResponseWriter
	own      http.Header // the headers when forwarding began
	informed bool        // a 1xx was written since own was last put back
}

// keepOwnHeaders wraps w for the ReverseProxy. It returns w itself when w
// holds no header to keep, or when in's context can never end (the
// ReverseProxy would then look for w's CloseNotify, which the wrapper
// hides).
func keepOwnHeaders(w http.ResponseWriter, in *http.Request) http.ResponseWriter {
	h := w.Header()
	if len(h) == 0 || in.Context().Done() == nil {
		return w
	}
	return &ownHeadersWriter{ResponseWriter: w, own: h.Clone()}
}

func (k *ownHeadersWriter) WriteHeader(code int) {
	k.putBack()
	k.ResponseWriter.WriteHeader(code)
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		k.informed = true
	}
}

func (k *ownHeadersWriter) Write(p []byte) (int, error) {
	k.putBack()
	return k.ResponseWriter.Write(p)
}

// putBack adds the headers set before forwarding back after a 1xx.
func (k *ownHeadersWriter) putBack() {
	if !k.informed {
		return
	}
	k.informed = false
	h := k.ResponseWriter.Header()
	for name, vv := range k.own {
		h[name] = append(vv[:len(vv):len(vv)], h[name]...)
	}
}

// Unwrap lets http.ResponseController reach the connection (flushes,
// hijacking an upgraded connection).
func (k *ownHeadersWriter) Unwrap() http.ResponseWriter { return k.ResponseWriter }
