package telemetry

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// TestQuotaReadRefused: every reason's series exists at 0 from the start,
// each refusal counts once under its reason, an unknown reason is not
// counted, and a nil Metrics does nothing.
func TestQuotaReadRefused(t *testing.T) {
	m, p := newTestMetrics(t)
	const name = "quotagate_quota_reads_refused_total"
	equalSeries(t, "fresh", series(t, scrape(t, p.Metrics), name, dto.MetricType_COUNTER), map[string]float64{
		"reason=caller": 0, "reason=tier": 0, "reason=budget": 0, "reason=breaker_open": 0, "reason=store_error": 0})
	for range 3 {
		m.QuotaReadRefused(ReadBudget)
	}
	m.QuotaReadRefused(ReadTier)
	m.QuotaReadRefused("made_up")
	var none *Metrics
	none.QuotaReadRefused(ReadBudget)
	equalSeries(t, "counted", series(t, scrape(t, p.Metrics), name, dto.MetricType_COUNTER), map[string]float64{
		"reason=caller": 0, "reason=tier": 1, "reason=budget": 3, "reason=breaker_open": 0, "reason=store_error": 0})
}
