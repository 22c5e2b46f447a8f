package telemetry

import (
	"context"
	"fmt"
	"math"

	"go.opentelemetry.io/otel/metric"
)

// ObserveLogDrops reports dropped() at each collection as
// quotagate_log_lines_dropped_total: access log lines lost because the
// log's queue was full (AccessLog.Dropped). The counter is exported from
// the first collection. dropped is called from any goroutine. Calling it
// again replaces the previous function; nil removes it.
func (m *Metrics) ObserveLogDrops(dropped func() uint64) error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.logDrops != nil {
		if err := m.logDrops.Unregister(); err != nil {
			return fmt.Errorf("telemetry: replacing log drops callback: %w", err)
		}
		m.logDrops = nil
	}
	if dropped == nil {
		return nil
	}
	c, err := m.meter.Int64ObservableCounter("quotagate.log.lines.dropped",
		metric.WithDescription("Access log lines dropped because the log's queue was full."))
	if err != nil {
		return fmt.Errorf("telemetry: log drops counter: %w", err)
	}
	m.logDrops, err = m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(c, int64(min(dropped(), math.MaxInt64)))
		return nil
	}, c)
	if err != nil {
		return fmt.Errorf("telemetry: registering log drops callback: %w", err)
	}
	return nil
}
