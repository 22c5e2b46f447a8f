package telemetry

import (
	"context"
	"fmt"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// MaxHotKeyRanks is how many ranks quotagate_hot_key_decisions_rate reports.
// The label is the rank, never the key, so the series stay bounded.
const MaxHotKeyRanks = 10

// ObserveHotKeys reports, at each collection, the estimated decisions per
// second of the busiest keys as quotagate_hot_key_decisions_rate{rank="1"}
// to {rank="10"}. rates returns them highest first; entries past
// MaxHotKeyRanks are ignored, and ranks it does not fill report 0, so all
// ten series exist from the first collection. Which key holds a rank is on the admin API
// (/hotkeys), not in a label. Calling it again replaces the previous
// function; nil removes it.
func (m *Metrics) ObserveHotKeys(rates func() []float64) error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.hot != nil {
		if err := m.hot.Unregister(); err != nil {
			return fmt.Errorf("telemetry: replacing hot key callback: %w", err)
		}
		m.hot = nil
	}
	if rates == nil {
		return nil
	}
	g, err := m.meter.Float64ObservableGauge("quotagate.hot_key.decisions.rate",
		metric.WithDescription("Estimated decisions per second of the busiest store keys, by rank."))
	if err != nil {
		return fmt.Errorf("telemetry: hot key gauge: %w", err)
	}
	ranks := make([]metric.ObserveOption, MaxHotKeyRanks)
	for i := range ranks {
		ranks[i] = metric.WithAttributeSet(attribute.NewSet(attribute.String("rank", strconv.Itoa(i+1))))
	}
	m.hot, err = m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		r := rates()
		for i := range ranks {
			v := 0.0 // a rank without a key: nothing decided
			if i < len(r) {
				v = r[i]
			}
			o.ObserveFloat64(g, v, ranks[i])
		}
		return nil
	}, g)
	if err != nil {
		return fmt.Errorf("telemetry: registering hot key callback: %w", err)
	}
	return nil
}
