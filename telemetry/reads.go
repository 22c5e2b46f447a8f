package telemetry

import "go.opentelemetry.io/otel/attribute"

// Reasons of quotagate_quota_reads_refused_total: why a read of the quota
// endpoint got no answer from the store.
const (
	// ReadCaller: the caller's own bound of reads (429, no store call).
	ReadCaller = "caller"
	// ReadTier: stage 1 of the caller's tier is spent (429, no store call).
	ReadTier = "tier"
	// ReadBudget: the gateway-wide read budget (server.quota_reads) is
	// spent (429, no store call).
	ReadBudget = "budget"
	// ReadBreakerOpen: the store's breaker is not closed (503, no store
	// call).
	ReadBreakerOpen = "breaker_open"
	// ReadStoreError: the store call failed (503).
	ReadStoreError = "store_error"
)

var readReasons = []string{ReadCaller, ReadTier, ReadBudget, ReadBreakerOpen, ReadStoreError}

// labelReadReason is the reason a read was refused.
const labelReadReason attribute.Key = "reason"

// initReads creates quotagate_quota_reads_refused_total, with every
// reason's series at 0. A flood of refused reads is the case it counts,
// so it is kept in cells (see asyncCounter) with a callback of its own.
func (m *Metrics) initReads() error {
	c, err := newAsyncCounter(m.meter, "quotagate.quota.reads.refused",
		"Quota endpoint reads answered without the store's state, by reason: caller, tier, budget (429, no store call), breaker_open (503, no store call), store_error (503).",
		func(s string) attribute.Set { return attribute.NewSet(labelReadReason.String(s)) })
	if err != nil {
		return err
	}
	for _, r := range readReasons {
		c.add(r, 0)
	}
	m.readsRefused = c
	return observeCounters(m.meter, c)
}

// QuotaReadRefused counts one quota endpoint read refused for reason (one
// of the Read* constants; others are not counted).
func (m *Metrics) QuotaReadRefused(reason string) {
	if m == nil || m.readsRefused == nil {
		return
	}
	for _, r := range readReasons {
		if r == reason {
			m.readsRefused.add(reason, 1)
			return
		}
	}
}
