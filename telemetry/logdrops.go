package telemetry

import (
	"context"
	"fmt"
	"math"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The kind attribute of quotagate_log_lines_dropped_total.
var (
	logKindAccess      = metric.WithAttributeSet(attribute.NewSet(attribute.String("kind", "access")))
	logKindOperational = metric.WithAttributeSet(attribute.NewSet(attribute.String("kind", "operational")))
)

// ObserveLogDrops reports dropped() at each collection as
// quotagate_log_lines_dropped_total, one series per kind: kind="access"
// for access lines and kind="operational" for operational ones
// (LogSink.Drops), both exported from the first collection, at 0 until a
// line is lost. NewMetrics reports zeros until it is called. dropped is
// called from any goroutine. Calling it again replaces the previous
// function; nil removes it.
func (m *Metrics) ObserveLogDrops(dropped func() LogDrops) error {
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
		metric.WithDescription("Log lines dropped because the log's buffer was full or its destination stalled, by kind (access, operational)."))
	if err != nil {
		return fmt.Errorf("telemetry: log drops counter: %w", err)
	}
	m.logDrops, err = m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		d := dropped()
		o.ObserveInt64(c, int64(min(d.Access, math.MaxInt64)), logKindAccess)
		o.ObserveInt64(c, int64(min(d.Operational, math.MaxInt64)), logKindOperational)
		return nil
	}, c)
	if err != nil {
		return fmt.Errorf("telemetry: registering log drops callback: %w", err)
	}
	return nil
}
