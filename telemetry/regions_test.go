package telemetry

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// gaugePoints maps each data point of a float64 gauge by its attributes to
// its value.
func gaugePoints(t *testing.T, m metricdata.Metrics) map[attribute.Distinct]float64 {
	t.Helper()
	g, ok := m.Data.(metricdata.Gauge[float64])
	if !ok {
		t.Fatalf("%s: data %T, want a float64 gauge", m.Name, m.Data)
	}
	points := map[attribute.Distinct]float64{}
	for _, p := range g.DataPoints {
		points[p.Attributes.Equivalent()] = p.Value
	}
	return points
}

// TestObserveRegionPerPolicy: at each collection, the region's totals are
// exported labelled with the region alone, and each policy's figures with
// the region and the policy, exactly as the stats function gave them; the
// counters are monotonic sums.
func TestObserveRegionPerPolicy(t *testing.T) {
	ctx := context.Background()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(ctx) })
	m, err := NewMetrics(mp)
	if err != nil {
		t.Fatal(err)
	}
	stats := RegionStats{Region: "eu", Reporter: true, Demand: 30, Admitted: 12, Granted: 15, ReportLatencySeconds: 0.25,
		Keys: 3, SinceReportSeconds: 0.5, SafeDecisions: 9,
		Policies: []RegionPolicyStats{
			{Policy: "enterprise", Demand: 20, Admitted: 10, Granted: 12, Keys: 2, SafeDecisions: 4, LeaseExpiries: 2},
			{Policy: "free", Demand: 10, Admitted: 2, Granted: 3, Keys: 1, SafeDecisions: 5},
		}}
	if err := m.ObserveRegion(func() (RegionStats, bool) { return stats, true }); err != nil {
		t.Fatal(err)
	}
	set := func(kvs ...attribute.KeyValue) attribute.Distinct {
		s := attribute.NewSet(kvs...)
		return s.Equivalent()
	}
	region := set(attribute.String("region", "eu"))
	of := func(policy string) attribute.Distinct {
		return set(attribute.String("region", "eu"), attribute.String("policy", policy))
	}
	for round := range 2 {
		got := collect(t, r)
		for name, want := range map[string]map[attribute.Distinct]float64{
			"quotagate.region.demand.rate":          {region: 30},
			"quotagate.region.admitted.rate":        {region: 12},
			"quotagate.region.granted.rate":         {region: 15},
			"quotagate.region.granted.keys":         {region: 3},
			"quotagate.region.reporter":             {region: 1},
			"quotagate.region.policy.demand.rate":   {of("enterprise"): 20, of("free"): 10},
			"quotagate.region.policy.admitted.rate": {of("enterprise"): 10, of("free"): 2},
			"quotagate.region.policy.granted.rate":  {of("enterprise"): 12, of("free"): 3},
			"quotagate.region.policy.granted.keys":  {of("enterprise"): 2, of("free"): 1},
		} {
			points := gaugePoints(t, got[name])
			if len(points) != len(want) {
				t.Errorf("round %d: %s has %d points, want %d", round, name, len(points), len(want))
			}
			for k, v := range want {
				if points[k] != v {
					t.Errorf("round %d: %s%v = %v, want %v", round, name, k, points[k], v)
				}
			}
		}
		for name, want := range map[string]map[attribute.Distinct]int64{
			"quotagate.region.safe_share.decisions":        {region: 9 + int64(round)},
			"quotagate.region.policy.safe_share.decisions": {of("enterprise"): 4 + int64(round), of("free"): 5},
			"quotagate.region.lease.expiries":              {of("enterprise"): 2 + int64(round), of("free"): 0},
		} {
			s, points := sumPoints(t, got[name])
			if !s.IsMonotonic || s.Temporality != metricdata.CumulativeTemporality {
				t.Errorf("%s: monotonic %v, temporality %v, want a cumulative counter", name, s.IsMonotonic, s.Temporality)
			}
			if len(points) != len(want) {
				t.Errorf("round %d: %s has %d points, want %d", round, name, len(points), len(want))
			}
			for k, v := range want {
				if points[k] != v {
					t.Errorf("round %d: %s%v = %v, want %v", round, name, k, points[k], v)
				}
			}
		}
		// One more safe-share decision and lease expiry of enterprise.
		stats.SafeDecisions++
		stats.Policies[0].SafeDecisions++
		stats.Policies[0].LeaseExpiries++
	}
	// Not a region's instance (no store.global): no region series at all.
	if err := m.ObserveRegion(func() (RegionStats, bool) { return RegionStats{}, false }); err != nil {
		t.Fatal(err)
	}
	for name, md := range collect(t, r) {
		if g, ok := md.Data.(metricdata.Gauge[float64]); ok && len(g.DataPoints) > 0 && strings.HasPrefix(name, "quotagate.region.") {
			t.Errorf("%s exported without a region: %v", name, g.DataPoints)
		}
	}
}
