package telemetry

import (
	"context"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// TestSettlementSeries: primed series start at zero for every result and
// direction; a settlement counts one of its result and its units in the
// direction of their sign (none for 0).
func TestSettlementSeries(t *testing.T) {
	m, p := newTestMetrics(t)
	m.PrimeSettlements([]string{"tokens"})
	ctx := context.Background()
	m.Settlement(ctx, "tokens", SettleRefund, -180)
	m.Settlement(ctx, "tokens", SettleCharge, 1400)
	m.Settlement(ctx, "tokens", SettleCharge, 5)
	m.Settlement(ctx, "tokens", SettleMissing, 0)
	fams := scrape(t, p.Metrics)
	c := dto.MetricType_COUNTER
	equalSeries(t, "settlements", series(t, fams, "quotagate_settlements_total", c), map[string]float64{
		"policy=tokens,result=refund": 1, "policy=tokens,result=charge": 2,
		"policy=tokens,result=exact": 0, "policy=tokens,result=missing": 1,
	})
	equalSeries(t, "settled units", series(t, fams, "quotagate_settled_units_total", c), map[string]float64{
		"direction=refund,policy=tokens": 180, "direction=charge,policy=tokens": 1405,
	})
}
