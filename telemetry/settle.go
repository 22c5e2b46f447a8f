package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
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
	settlements *asyncCounter[[2]string] // policy, result
	units       *asyncCounter[[2]string] // policy, direction
}

func (m *Metrics) initSettle() error {
	s := &m.settle
	var err error
	s.settlements, err = newAsyncCounter(m.meter, "quotagate.settlements",
		"Settlements of reserved costs, by policy and result (refund, charge, exact, missing).",
		func(k [2]string) attribute.Set {
			return attribute.NewSet(labelPolicy.String(k[0]), labelResult.String(k[1]))
		})
	if err != nil {
		return err
	}
	s.units, err = newAsyncCounter(m.meter, "quotagate.settled.units",
		"Units given back (refund) or taken beyond the reservation (charge) by settlements, by policy.",
		func(k [2]string) attribute.Set {
			return attribute.NewSet(labelPolicy.String(k[0]), labelDirection.String(k[1]))
		})
	return err
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
	m.settle.settlements.add([2]string{policy, result}, 1)
	switch {
	case units < 0:
		m.settle.units.add([2]string{policy, DirectionRefund}, -units)
	case units > 0:
		m.settle.units.add([2]string{policy, DirectionCharge}, units)
	}
}

// PrimeSettlements exports the settlement series of each policy at zero:
// every result and both directions.
func (m *Metrics) PrimeSettlements(policies []string) {
	if m == nil {
		return
	}
	for _, p := range policies {
		for _, r := range []string{SettleRefund, SettleCharge, SettleExact, SettleMissing} {
			m.settle.settlements.add([2]string{p, r}, 0)
		}
		for _, d := range []string{DirectionRefund, DirectionCharge} {
			m.settle.units.add([2]string{p, d}, 0)
		}
	}
}
