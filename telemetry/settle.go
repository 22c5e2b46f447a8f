package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Values of the result label of quotagate_settlements_total: the response
// reported less than was reserved (refund), more (charge), exactly as much
// (exact), or nothing that could be read (missing: the reservation stands).
const (
	SettleRefund  = "refund"
	SettleCharge  = "charge"
	SettleExact   = "exact"
	SettleMissing = "missing"
)

// Values of the direction label of quotagate_settled_units_total.
const (
	DirectionRefund = "refund"
	DirectionCharge = "charge"
)

const labelDirection attribute.Key = "direction"

// settleInstruments count settlements of reserved costs.
type settleInstruments struct {
	settlements metric.Int64Counter
	units       metric.Int64Counter
	resultSets  *optCache[[2]string] // policy, result
	dirSets     *optCache[[2]string] // policy, direction
}

func (m *Metrics) initSettle() error {
	s := &m.settle
	var err error
	s.settlements, err = m.meter.Int64Counter("quotagate.settlements",
		metric.WithDescription("Settlements of reserved costs, by policy and result (refund, charge, exact, missing)."))
	if err != nil {
		return err
	}
	s.units, err = m.meter.Int64Counter("quotagate.settled.units",
		metric.WithDescription("Units given back (refund) or taken beyond the reservation (charge) by settlements, by policy."))
	if err != nil {
		return err
	}
	s.resultSets = newOptCache(func(k [2]string) attribute.Set {
		return attribute.NewSet(labelPolicy.String(k[0]), labelResult.String(k[1]))
	})
	s.dirSets = newOptCache(func(k [2]string) attribute.Set {
		return attribute.NewSet(labelPolicy.String(k[0]), labelDirection.String(k[1]))
	})
	return nil
}

// Settlement counts one settlement of policy in quotagate_settlements_total
// (result is SettleRefund, SettleCharge, SettleExact or SettleMissing) and
// its units, when not 0, in quotagate_settled_units_total: units < 0 were
// given back (direction refund), units > 0 charged. policy must come from
// the configuration.
func (m *Metrics) Settlement(ctx context.Context, policy, result string, units int64) {
	if m == nil {
		return
	}
	m.settle.settlements.Add(ctx, 1, m.settle.resultSets.get([2]string{policy, result}).add...)
	switch {
	case units < 0:
		m.settle.units.Add(ctx, -units, m.settle.dirSets.get([2]string{policy, DirectionRefund}).add...)
	case units > 0:
		m.settle.units.Add(ctx, units, m.settle.dirSets.get([2]string{policy, DirectionCharge}).add...)
	}
}

// PrimeSettlements exports the settlement series of each policy at zero:
// every result and both directions.
func (m *Metrics) PrimeSettlements(policies []string) {
	if m == nil {
		return
	}
	ctx := context.Background()
	for _, p := range policies {
		for _, r := range []string{SettleRefund, SettleCharge, SettleExact, SettleMissing} {
			m.settle.settlements.Add(ctx, 0, m.settle.resultSets.get([2]string{p, r}).add...)
		}
		for _, d := range []string{DirectionRefund, DirectionCharge} {
			m.settle.units.Add(ctx, 0, m.settle.dirSets.get([2]string{p, d}).add...)
		}
	}
}
