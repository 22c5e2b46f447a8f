package telemetry

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// RegionStats is what an instance of a region reports about the quotas
// shared across regions (see docs/concepts/regions.md). Rates are units
// per second, summed over the keys.
type RegionStats struct {
	Region string
	// Reporter is true on the instance that reports for the region; the
	// demand, admitted, granted and report latency are its last report's,
	// 0 on the others.
	Reporter                  bool
	Demand, Admitted, Granted float64
	ReportLatencySeconds      float64
	// Keys is the number of keys with a live grant.
	Keys int64
	// SinceReportSeconds is how long ago the region last heard from the
	// global owner; -1 when it never has.
	SinceReportSeconds float64
	// SafeDecisions counts items decided on a safe share; never decreases.
	SafeDecisions uint64
}

// ObserveRegion reports, at each collection, stats() as the gauges
// quotagate_region_reporter, quotagate_region_demand_rate,
// quotagate_region_admitted_rate, quotagate_region_granted_rate,
// quotagate_region_report_latency_seconds, quotagate_region_granted_keys,
// quotagate_region_since_report_seconds and the counter
// quotagate_region_safe_share_decisions_total, each labelled with the
// region alone (bounded: one per instance). ok false reports nothing.
// Calling it again replaces the previous function; nil removes it.
func (m *Metrics) ObserveRegion(stats func() (RegionStats, bool)) error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.regions != nil {
		if err := m.regions.Unregister(); err != nil {
			return fmt.Errorf("telemetry: replacing region callback: %w", err)
		}
		m.regions = nil
	}
	if stats == nil {
		return nil
	}
	gauge := func(name, desc string) (metric.Float64ObservableGauge, error) {
		return m.meter.Float64ObservableGauge(name, metric.WithDescription(desc))
	}
	var gs [7]metric.Float64ObservableGauge
	for i, d := range [...][2]string{
		{"quotagate.region.reporter", "1 on the instance that reports its region's demand to the global owner."},
		{"quotagate.region.demand.rate", "Units per second the region was asked at its last report, over its cross-region keys."},
		{"quotagate.region.admitted.rate", "Units per second the region admitted at its last report."},
		{"quotagate.region.granted.rate", "Units per second the global owner granted the region at its last report."},
		{"quotagate.region.report.latency.seconds", "Duration of the region's last report to the global owner."},
		{"quotagate.region.granted.keys", "Cross-region keys this instance holds a live grant of."},
		{"quotagate.region.since.report.seconds", "Seconds since the region last heard from the global owner (-1: never); past lease_ttl the region is on its safe shares."},
	} {
		var err error
		if gs[i], err = gauge(d[0], d[1]); err != nil {
			return fmt.Errorf("telemetry: %s: %w", d[0], err)
		}
	}
	safe, err := m.meter.Int64ObservableCounter("quotagate.region.safe_share.decisions",
		metric.WithDescription("Cross-region items decided on a safe share: no live grant (partitioned, cold or warming up)."))
	if err != nil {
		return fmt.Errorf("telemetry: region safe share counter: %w", err)
	}
	insts := []metric.Observable{safe}
	for _, g := range gs {
		insts = append(insts, g)
	}
	m.regions, err = m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s, ok := stats()
		if !ok {
			return nil
		}
		attrs := metric.WithAttributeSet(attribute.NewSet(attribute.String("region", s.Region)))
		reporter := 0.0
		if s.Reporter {
			reporter = 1
		}
		for i, v := range []float64{reporter, s.Demand, s.Admitted, s.Granted, s.ReportLatencySeconds, float64(s.Keys), s.SinceReportSeconds} {
			o.ObserveFloat64(gs[i], v, attrs)
		}
		o.ObserveInt64(safe, int64(min(s.SafeDecisions, 1<<62)), attrs)
		return nil
	}, insts...)
	if err != nil {
		return fmt.Errorf("telemetry: registering region callback: %w", err)
	}
	return nil
}
