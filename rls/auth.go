package rls

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/telemetry"
)

// clientAuth is what rls.client_auth asks of every call but a health
// check: the bearer token, a verified client certificate, or both. Safe
// for concurrent use; it never changes after NewServer.
type clientAuth struct {
	// token is the SHA-256 of the shared bearer token; nil asks for none.
	token *[sha256.Size]byte
	// cas verify client certificates; nil asks for none.
	cas     *x509.CertPool
	metrics *telemetry.Metrics
}

// newClientAuth reads rls.client_auth of cfg: the token from the
// environment variable token_env names (getenv), the CAs from
// client_ca_file. It returns nil when the section is left out or is
// none: true. A variable named but unset or empty is a config.Errors
// naming rls.client_auth.token_env, as the admin token's is.
func newClientAuth(cfg *config.Config, getenv func(string) (string, bool), m *telemetry.Metrics) (*clientAuth, error) {
	c := cfg.RLS.ClientAuth
	if c == nil || c.None {
		return nil, nil
	}
	a := &clientAuth{metrics: m}
	if name := c.TokenEnv; name != "" {
		v, ok := getenv(name)
		switch {
		case !ok:
			return nil, config.Errors{{Path: "rls.client_auth.token_env", Problem: "environment variable " + name + " is not set"}}
		case v == "":
			return nil, config.Errors{{Path: "rls.client_auth.token_env", Problem: "environment variable " + name + " is empty"}}
		}
		sum := sha256.Sum256([]byte(v))
		a.token = &sum
	}
	if f := c.ClientCAFile; f != "" {
		pool, err := config.ClientCAPool(f)
		if err != nil {
			return nil, fmt.Errorf("rls.client_auth.client_ca_file: %w", err)
		}
		a.cas = pool
	}
	return a, nil
}

// healthPrefix is the method prefix of grpc.health.v1, which needs no
// client authentication: Envoy's and Kubernetes' health checks send none.
var healthPrefix = "/" + healthpb.Health_ServiceDesc.ServiceName + "/"

// checkToken returns "" when values, the Authorization header's values,
// carry the token, else the reason of the refusal (telemetry.RLSNoToken
// or telemetry.RLSBadToken). Exactly one "Bearer <token>" value is
// accepted; the scheme is case-insensitive.
func (a *clientAuth) checkToken(values []string) string {
	if a.token == nil {
		return ""
	}
	if len(values) == 0 {
		return telemetry.RLSNoToken
	}
	if len(values) > 1 {
		return telemetry.RLSBadToken
	}
	scheme, tok, ok := strings.Cut(values[0], " ")
	if tok = strings.TrimLeft(tok, " "); !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return telemetry.RLSBadToken
	}
	sum := sha256.Sum256([]byte(tok))
	if subtle.ConstantTimeCompare(sum[:], a.token[:]) != 1 {
		return telemetry.RLSBadToken
	}
	return ""
}

// tokenMessage is what a refused call is told, by reason.
func tokenMessage(reason string) string {
	if reason == telemetry.RLSNoToken {
		return "the decision service requires authorization: Bearer <token> (rls.client_auth.token_env)"
	}
	return "the bearer token is not valid for the decision service"
}

// tap refuses a gRPC call without the token before its stream is created,
// so that an unauthenticated caller's message is never read or decoded:
// UNAUTHENTICATED, counted. Health checks pass. It runs on the
// connection's reader goroutine and does one SHA-256 of a header.
func (a *clientAuth) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if strings.HasPrefix(info.FullMethodName, healthPrefix) {
		return ctx, nil
	}
	if reason := a.checkToken(info.Header.Get("authorization")); reason != "" {
		a.metrics.RLSUnauthenticated(telemetry.RLSAPIGRPC, reason)
		return ctx, status.Error(codes.Unauthenticated, tokenMessage(reason))
	}
	return ctx, nil
}

// protect answers a request to next without the token 401, an
// application/problem+json body (RFC 9457) whose error and message
// members are the check API's, with WWW-Authenticate; counted.
func (a *clientAuth) protect(next http.Handler) http.Handler {
	if a == nil || a.token == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reason := a.checkToken(r.Header.Values("Authorization"))
		if reason == "" {
			next.ServeHTTP(w, r)
			return
		}
		a.metrics.RLSUnauthenticated(telemetry.RLSAPIHTTP, reason)
		challenge := `Bearer realm="quotagate-rls"`
		if reason == telemetry.RLSBadToken {
			challenge += `, error="invalid_token"`
		}
		w.Header().Set("WWW-Authenticate", challenge)
		writeUnauthenticated(w, tokenMessage(reason))
	})
}

// writeUnauthenticated writes a 401 problem+json body.
func writeUnauthenticated(w http.ResponseWriter, message string) {
	b, _ := json.Marshal(map[string]any{ // a map of strings and an int always marshals
		"type": "urn:quotagate:problem:unauthenticated", "title": "Unauthenticated", "status": http.StatusUnauthorized,
		"error": "unauthenticated", "message": message,
	})
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write(append(b, '\n'))
}

// errNoClientCert ends a handshake without a client certificate.
var errNoClientCert = errors.New("rls: a client certificate is required (rls.client_auth.client_ca_file)")

// serverTLS returns base for the listener of api, asking for client
// certificates when a.cas is set. The certificate is verified as
// tls.RequireAndVerifyClientCert does (against the CAs, with the
// intermediates the client sent, for extended key usage clientAuth, at
// the current time), but in VerifyConnection, so that a refusal is
// counted in quotagate_rls_unauthenticated_total by api and reason: the
// standard verification fails the handshake before any callback is told.
func (a *clientAuth) serverTLS(base *tls.Config, api string) *tls.Config {
	c := base.Clone()
	if a == nil || a.cas == nil {
		return c
	}
	// RequestClientCert: the certificate is asked for (naming the CAs),
	// and its absence, like its verification, is VerifyConnection's call.
	c.ClientAuth = tls.RequestClientCert
	c.ClientCAs = a.cas
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			a.metrics.RLSUnauthenticated(api, telemetry.RLSNoCertificate)
			return errNoClientCert
		}
		opts := x509.VerifyOptions{Roots: a.cas, Intermediates: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		for _, ic := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(ic)
		}
		if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
			a.metrics.RLSUnauthenticated(api, telemetry.RLSBadCertificate)
			return fmt.Errorf("rls: client certificate refused: %w", err)
		}
		return nil
	}
	return c
}
