package telemetry

import (
	"context"
	"fmt"
	"math"

	"go.opentelemetry.io/otel/metric"
)

// ObserveLogDrops reports dropped() at each collection as
// quotagate_log_lines_dropped_total: log lines lost because the log's
// queue was full (AsyncWriter.Dropped). It is exported from the first
// collection, at 0 until a line is dropped. Register it once per Metrics;
// dropped is called from any goroutine.
func (m *Metrics) ObserveLogDrops(dropped func() uint64) error {
	if m == nil || dropped == nil {
		return nil
	}
	_, err := m.meter.Int64ObservableCounter("quotagate.log.lines.dropped",
		metric.WithDescription("Access log lines dropped because the log's queue was full."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(int64(min(dropped(), math.MaxInt64)))
			return nil
		}))
	if err != nil {
		return fmt.Errorf("telemetry: log drops counter: %w", err)
	}
	return nil
}
