// Package rls is quotagate's decision service: Envoy's rate limit service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) over gRPC,
// and POST /v1/check over HTTP, deciding on the same ratelimit.Store stack
// as the gateway.
//
// Limits are read from descriptor files in envoyproxy/ratelimit's YAML format
// (see ParseFile), unchanged, with a few optional extensions. A request names
// a domain and a list of descriptors, each an ordered list of key/value
// entries. Each descriptor is matched most-specifically against its domain's
// tree (see Domain.Match); the matched rules become ratelimit.Items, keyed by
// a hash of the descriptor's entries (raw values never appear in store keys,
// metric labels or spans), and all of them are decided in one Store.Decide
// call (see Engine.Decide).
//
// Callers authenticate as rls.client_auth says (see config.RLSClientAuth):
// a shared bearer token, checked before a gRPC call's stream is created
// (see grpc.InTapHandle) and before an HTTP check is read, and/or client
// certificates, checked in the TLS handshake. Health checks never need it.
//
// The package imports ratelimit, config and telemetry; it never imports the
// gateway: both are front doors to the same store.
package rls
