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
	// Policies are the same figures per cross-region policy of the
	// configuration (the key classes), one each.
	Policies []RegionPolicyStats
}

// RegionPolicyStats is one cross-region policy of RegionStats. Demand,
// Admitted and Granted are the reporter's last report over the policy's
// keys (0 on the other instances), Keys the policy's keys with a live
// grant that this instance decided lately or reported. The rates and
// SafeDecisions, summed over the policies, are the region's (but for the
// keys of a policy a reload removed). The counters never decrease.
type RegionPolicyStats struct {
	Policy                    string
	Demand, Admitted, Granted float64
	Keys                      int64
	SafeDecisions             uint64
	// LeaseExpiries counts the policy's keys whose grant expired, not
	// renewed, while this instance was deciding them: it fell to the safe
	// share for them.
	LeaseExpiries uint64
}

// ObserveRegion reports, at each collection, stats() as the gauges
// quotagate_region_reporter, quotagate_region_demand_rate,
// quotagate_region_admitted_rate, quotagate_region_granted_rate,
// quotagate_region_report_latency_seconds, quotagate_region_granted_keys,
// quotagate_region_since_report_seconds and the counter
// quotagate_region_safe_share_decisions_total, each labelled with the
// region alone (bounded: one per instance). Per policy of s.Policies, it
// reports the gauges quotagate_region_policy_demand_rate,
// quotagate_region_policy_admitted_rate,
// quotagate_region_policy_granted_rate and
// quotagate_region_policy_granted_keys, and the counters
// quotagate_region_policy_safe_share_decisions_total and
// quotagate_region_lease_expiries_total, labelled with the region and the
// policy (bounded by the configuration). ok false reports nothing.
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
	// The region's gauges (gs[:7], labelled with the region) and its
	// policies' (gs[7:], with the region and the policy).
	var gs [11]metric.Float64ObservableGauge
	for i, d := range [...][2]string{
		{"quotagate.region.reporter", "1 on the instance that reports its region's demand to the global owner."},
		{"quotagate.region.demand.rate", "Units per second the region was asked at its last report, over its cross-region keys."},
		{"quotagate.region.admitted.rate", "Units per second the region admitted at its last report."},
		{"quotagate.region.granted.rate", "Units per second the global owner granted the region at its last report."},
		{"quotagate.region.report.latency.seconds", "Duration of the region's last report to the global owner."},
		{"quotagate.region.granted.keys", "Cross-region keys this instance holds a live grant of."},
		{"quotagate.region.since.report.seconds", "Seconds since the region last heard from the global owner (-1: never); past lease_ttl the region is on its safe shares."},
		{"quotagate.region.policy.demand.rate", "Units per second the region was asked at its last report, over the keys of a cross-region policy."},
		{"quotagate.region.policy.admitted.rate", "Units per second the region admitted at its last report, over the keys of a cross-region policy."},
		{"quotagate.region.policy.granted.rate", "Units per second the global owner granted the region at its last report, over the keys of a cross-region policy."},
		{"quotagate.region.policy.granted.keys", "Keys of a cross-region policy this instance holds a live grant of."},
	} {
		var err error
		if gs[i], err = m.meter.Float64ObservableGauge(d[0], metric.WithDescription(d[1])); err != nil {
			return fmt.Errorf("telemetry: %s: %w", d[0], err)
		}
	}
	// The region's counter of safe-share decisions, and its policies'
	// (safe-share decisions, lease expiries).
	var cs [3]metric.Int64ObservableCounter
	for i, d := range [...][2]string{
		{"quotagate.region.safe_share.decisions", "Cross-region items decided on a safe share: no live grant (partitioned, cold or warming up)."},
		{"quotagate.region.policy.safe_share.decisions", "Items of a cross-region policy decided on a safe share."},
		{"quotagate.region.lease.expiries", "Keys of a cross-region policy whose grant expired, not renewed, while this instance decided them: it fell to the safe share for them."},
	} {
		var err error
		if cs[i], err = m.meter.Int64ObservableCounter(d[0], metric.WithDescription(d[1])); err != nil {
			return fmt.Errorf("telemetry: %s: %w", d[0], err)
		}
	}
	insts := make([]metric.Observable, 0, len(gs)+len(cs))
	for _, g := range gs {
		insts = append(insts, g)
	}
	for _, c := range cs {
		insts = append(insts, c)
	}
	var err error
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
		o.ObserveInt64(cs[0], int64(min(s.SafeDecisions, 1<<62)), attrs)
		for _, p := range s.Policies {
			attrs := metric.WithAttributeSet(attribute.NewSet(attribute.String("region", s.Region), labelPolicy.String(p.Policy)))
			for i, v := range []float64{p.Demand, p.Admitted, p.Granted, float64(p.Keys)} {
				o.ObserveFloat64(gs[7+i], v, attrs)
			}
			o.ObserveInt64(cs[1], int64(min(p.SafeDecisions, 1<<62)), attrs)
			o.ObserveInt64(cs[2], int64(min(p.LeaseExpiries, 1<<62)), attrs)
		}
		return nil
	}, insts...)
	if err != nil {
		return fmt.Errorf("telemetry: registering region callback: %w", err)
	}
	return nil
}
