package telemetry

import (
	"context"
	"fmt"
	"math"

	"go.opentelemetry.io/otel/metric"
)

// ObserveFleet reports, at each collection, size() as the gauge
// quotagate_fleet_size (the number of instances the shared limits are
// divided by) and localDenials() as the counter
// quotagate_local_denials_total (requests denied again from a remembered
// store denial, without a store call). Both are exported from the first
// collection; localDenials must never decrease. The functions are called
// from any goroutine. Calling it again replaces the previous functions;
// nil functions remove them.
func (m *Metrics) ObserveFleet(size func() int64, localDenials func() uint64) error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fleet != nil {
		if err := m.fleet.Unregister(); err != nil {
			return fmt.Errorf("telemetry: replacing fleet callback: %w", err)
		}
		m.fleet = nil
	}
	if size == nil || localDenials == nil {
		return nil
	}
	g, err := m.meter.Int64ObservableGauge("quotagate.fleet.size",
		metric.WithDescription("Instances sharing the store: the larger of store.fleet_size and the live registrations."))
	if err != nil {
		return fmt.Errorf("telemetry: fleet size gauge: %w", err)
	}
	c, err := m.meter.Int64ObservableCounter("quotagate.local.denials",
		metric.WithDescription("Requests denied from a remembered store denial, without a store call."))
	if err != nil {
		return fmt.Errorf("telemetry: local denials counter: %w", err)
	}
	m.fleet, err = m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(g, size())
		o.ObserveInt64(c, int64(min(localDenials(), math.MaxInt64)))
		return nil
	}, g, c)
	if err != nil {
		return fmt.Errorf("telemetry: registering fleet callback: %w", err)
	}
	return nil
}
