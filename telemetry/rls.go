package telemetry

import (
	"go.opentelemetry.io/otel/attribute"
)

// Values of the api label of quotagate_rls_unauthenticated_total: the
// decision service's gRPC listener (RLS v3) or its HTTP check API.
const (
	RLSAPIGRPC = "grpc"
	RLSAPIHTTP = "http"
)

// Values of the reason label of quotagate_rls_unauthenticated_total: a call
// without the bearer token or with another one, a TLS handshake without a
// client certificate or with one the client CA does not verify.
const (
	RLSNoToken        = "no_token"
	RLSBadToken       = "bad_token"
	RLSNoCertificate  = "no_certificate"
	RLSBadCertificate = "bad_certificate"
)

const (
	labelAPI       attribute.Key = "api"
	labelRLSReason attribute.Key = "reason"
)

// rlsInstruments count what the decision service refuses before deciding.
type rlsInstruments struct {
	unauthenticated *asyncCounter[[2]string] // api, reason
}

func (m *Metrics) initRLS() error {
	var err error
	m.rls.unauthenticated, err = newAsyncCounter(m.meter, "quotagate.rls.unauthenticated",
		"Calls and TLS handshakes the decision service refused for want of client authentication (rls.client_auth), by api and reason.",
		func(k [2]string) attribute.Set {
			return attribute.NewSet(labelAPI.String(k[0]), labelRLSReason.String(k[1]))
		})
	if err != nil {
		return err
	}
	// Every series exists from the start, rls on or off, so that a rate or
	// an alert on refusals has a series to read before the first one.
	for _, api := range []string{RLSAPIGRPC, RLSAPIHTTP} {
		for _, reason := range []string{RLSNoToken, RLSBadToken, RLSNoCertificate, RLSBadCertificate} {
			m.rls.unauthenticated.add([2]string{api, reason}, 0)
		}
	}
	return nil
}

// RLSUnauthenticated counts one refusal in
// quotagate_rls_unauthenticated_total. api is RLSAPIGRPC or RLSAPIHTTP;
// reason one of RLSNoToken, RLSBadToken, RLSNoCertificate and
// RLSBadCertificate. It does not allocate (after the first use of a pair):
// a flood of refused calls costs an atomic add each.
func (m *Metrics) RLSUnauthenticated(api, reason string) {
	if m == nil {
		return
	}
	m.rls.unauthenticated.add([2]string{api, reason}, 1)
}
