package proxy

import (
	"log"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"strings"
)

// The oracle: httputil.ReverseProxy, configured with the forwarder's
// rules through its documented hooks, is what the differential test
// holds the forwarder to (see differential_test.go). It is test code
// only; the product forwards with forward.go alone.

// newOracle returns a ReverseProxy handler for up that forwards as the
// forwarder does: the same exchanges over o.Transport (timeout and write
// watch), the same Observer and the same error funnel.
func newOracle(up Upstream, o Options, after afterFunc) http.Handler {
	obs := o.Observer
	if obs == nil {
		obs = NopObserver{}
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	funnel := &errorFunnel{upstream: up.Name, log: logger, write: obs.Error, onFailure: obs.Failure}
	target := *up.URL
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&target)
			setXForwarded(pr.Out.Header, pr.In)
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Del("X-Api-Key")
			allowed := oracleUpgradeAllowed(pr, obs.Upgrade)
			if !allowed {
				pr.Out.Header.Del("Upgrade")
				pr.Out.Header.Del("Connection")
			}
			pr.Out.Header.Del("Http2-Settings")
			obs.Outbound(pr.Out)
			if pr.Out.Body != nil {
				pr.Out.Body = sizeBody(pr.Out.Body, pr.Out.ContentLength)
			}
		},
		ModifyResponse: func(res *http.Response) error {
			if res.StatusCode < 100 {
				return errStatusBelow100
			}
			if err := refuseUnaskedSwitch(res); err != nil {
				return err
			}
			if res.StatusCode != http.StatusSwitchingProtocols {
				obs.Response(res)
			}
			return nil
		},
		Transport:    newExchanges(o.Transport, up.Timeout, after, obs.Watch),
		BufferPool:   defaultBufferPool,
		ErrorLog:     log.New(discardLog{}, "", 0),
		ErrorHandler: funnel.handle,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, in *http.Request) {
		rp.ServeHTTP(keepOwnHeaders(w, in), in)
	})
}

type discardLog struct{}

func (discardLog) Write(p []byte) (int, error) { return len(p), nil }

// oracleUpgradeAllowed is upgradeAllowed for the upgrade the ReverseProxy
// re-added after its removal of the hop-by-hop headers.
func oracleUpgradeAllowed(pr *httputil.ProxyRequest, allow func(*http.Request) bool) bool {
	token := pr.Out.Header.Get("Upgrade")
	return token != "" && strings.EqualFold(pr.Out.Header.Get("Connection"), "Upgrade") && upgradeAllowed(pr.In, token, allow)
}

// ownHeadersWriter is the ResponseWriter the oracle's ReverseProxy gets.
// After it has written an upstream's 1xx, the ReverseProxy clears the
// response headers, and with them the headers the handler's caller set
// before forwarding; the writer puts those back before the next header
// it writes, as the forwarder keeps them (see outbound.got1xx).
type ownHeadersWriter struct {
	http.ResponseWriter
	own      http.Header // the headers when forwarding began
	informed bool        // a 1xx was written since own was last put back
}

// keepOwnHeaders wraps w for the ReverseProxy; w itself when it holds no
// header to keep.
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

// Unwrap lets http.ResponseController reach the connection.
func (k *ownHeadersWriter) Unwrap() http.ResponseWriter { return k.ResponseWriter }
