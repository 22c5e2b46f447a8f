// Package telemetry builds quotagate's OpenTelemetry providers, its metric
// instruments and its structured logger.
//
// Setup returns the providers; it never installs them as OpenTelemetry
// globals, so every package receives them by injection and tests can replace
// them. Exporters are chosen only by the standard OTEL_* environment
// variables; with none set nothing leaves the process, while metrics are still
// served in Prometheus text by Providers.Metrics.
//
// Prometheus exposition: instruments carry OpenTelemetry names with dots and
// UCUM units ("quotagate.decision.duration", unit "s"); the Prometheus
// exporter translates them with the UnderscoreEscapingWithSuffixes strategy,
// which yields the names of the product contract
// (quotagate_decision_duration_seconds, quotagate_decisions_total, ...). The
// target_info series and the otel_scope_* labels are left out, so every
// series carries exactly the labels the contract lists: the instance is
// identified by the scrape target, and the resource travels with OTLP exports.
package telemetry

import "go.opentelemetry.io/otel/attribute"

// InstrumentationName is the instrumentation scope name for quotagate's own
// tracers and meters.
const InstrumentationName = "github.com/quotagate/quotagate"

// Span attribute keys used by the gateway. Values must be bounded (route and
// policy names from the configuration, outcomes, stage names) or hashed
// (AttrCaller); never a raw path, key, tenant or IP address.
const (
	// AttrRoute is the configured route name the request matched.
	AttrRoute attribute.Key = "quotagate.route"
	// AttrPolicy is the name of the rate-limit policy applied.
	AttrPolicy attribute.Key = "quotagate.policy"
	// AttrDecision is the outcome: allowed, denied, shadow_denied or error.
	AttrDecision attribute.Key = "quotagate.decision"
	// AttrStage is the limiting stage: local or global.
	AttrStage attribute.Key = "quotagate.stage"
	// AttrRemaining is the number of requests left in the current limit.
	AttrRemaining attribute.Key = "quotagate.remaining"
	// AttrRetryAfterMS is the suggested wait before retrying, in milliseconds.
	AttrRetryAfterMS attribute.Key = "quotagate.retry_after_ms"
	// AttrCaller is the hashed caller identity (never the raw key or subject).
	AttrCaller attribute.Key = "quotagate.caller"
	// AttrUpstream is the upstream, of a route that lists several, whose
	// policies were decided (the global stage) or that was forwarded to
	// (the request).
	AttrUpstream attribute.Key = "quotagate.upstream"
	// AttrQueuePolicy is the concurrency policy a request waited in line for.
	AttrQueuePolicy attribute.Key = "quotagate.queue_policy"
	// AttrQueueWaitMS is how long it waited, in milliseconds (rounded up).
	AttrQueueWaitMS attribute.Key = "quotagate.queue_wait_ms"
	// AttrSlotHeldMS is how long a concurrency slot was held, in milliseconds.
	AttrSlotHeldMS attribute.Key = "quotagate.slot_held_ms"
	// AttrReservedUnits is the units a request reserved before forwarding.
	AttrReservedUnits attribute.Key = "quotagate.reserved_units"
	// AttrSettledUnits is the units its response reported as used.
	AttrSettledUnits attribute.Key = "quotagate.settled_units"
	// AttrSettlement is how the reservation was settled: refund, charge,
	// exact or missing.
	AttrSettlement attribute.Key = "quotagate.settlement"
	// AttrDomain is the decision service's descriptor domain.
	AttrDomain attribute.Key = "quotagate.domain"
	// AttrDescriptors is the number of descriptors of a decision service call.
	AttrDescriptors attribute.Key = "quotagate.descriptors"
	// AttrDryRun is set on a decision service call that consumes nothing.
	AttrDryRun attribute.Key = "quotagate.dry_run"
)
