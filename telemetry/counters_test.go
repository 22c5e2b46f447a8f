package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// collect reads every metric of r by name.
func collect(t *testing.T, r sdkmetric.Reader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// sumPoints maps each data point of a sum by its attributes to its value.
func sumPoints(t *testing.T, m metricdata.Metrics) (metricdata.Sum[int64], map[attribute.Distinct]int64) {
	t.Helper()
	s, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s: data %T, want an int64 sum", m.Name, m.Data)
	}
	points := map[attribute.Distinct]int64{}
	for _, p := range s.DataPoints {
		points[p.Attributes.Equivalent()] = p.Value
	}
	return s, points
}

// TestCountersExportAsSynchronousOnes counts through Metrics and, with the
// same names, descriptions, attributes and values, through synchronous SDK
// counters on a second provider, and requires the same data from both
// readers (what OTLP sends): cumulative monotonic int64 sums with the same
// points.
func TestCountersExportAsSynchronousOnes(t *testing.T) {
	ctx := context.Background()
	cells, reference := sdkmetric.NewManualReader(), sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(cells))
	t.Cleanup(func() { _ = mp.Shutdown(ctx) })
	m, err := NewMetrics(mp)
	if err != nil {
		t.Fatal(err)
	}
	rp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reference))
	t.Cleanup(func() { _ = rp.Shutdown(ctx) })
	meter := rp.Meter(InstrumentationName)
	add := func(name, desc string, n int64, kvs ...attribute.KeyValue) {
		t.Helper()
		c, err := meter.Int64Counter(name, metric.WithDescription(desc))
		if err != nil {
			t.Fatal(err)
		}
		c.Add(ctx, n, metric.WithAttributeSet(attribute.NewSet(kvs...)))
	}

	for range 3 {
		m.Decision(ctx, "transfers", "global", ResultAllowed)
	}
	m.CountDecision(m.DecisionSeries("transfers", "local", ResultDenied))
	m.Request(ctx, "transfers", 200)
	m.Request(ctx, "transfers", 200)
	m.StoreError(ctx, "timeout")
	m.StoreFallback(ctx, "transfers", FallbackLocal)
	m.Shed(ctx, "payments", "free", 1)
	m.Settlement(ctx, "transfers", SettleRefund, -4)
	m.Prime(Series{Decisions: [][3]string{{"search", "global", ResultError}}})

	const decisions = "Rate-limit decisions by policy, stage and result."
	add("quotagate.decisions", decisions, 3, labelPolicy.String("transfers"), labelStage.String("global"), labelResult.String(ResultAllowed))
	add("quotagate.decisions", decisions, 1, labelPolicy.String("transfers"), labelStage.String("local"), labelResult.String(ResultDenied))
	add("quotagate.decisions", decisions, 0, labelPolicy.String("search"), labelStage.String("global"), labelResult.String(ResultError))
	add("quotagate.requests", "Requests answered, by route and HTTP status code.", 2, labelRoute.String("transfers"), labelCode.String("200"))
	add("quotagate.store.errors", "Failed calls to the shared limit store, by kind.", 1, labelKind.String("timeout"))
	add("quotagate.store.fallback", "Decisions taken by a policy's fallback while the store was unavailable.", 1,
		labelPolicy.String("transfers"), labelMode.String(FallbackLocal))
	add("quotagate.shed", "Requests shed with 503 overloaded because their upstream was saturated, by upstream and tier.", 1,
		labelUpstream.String("payments"), labelTier.String("free"))
	add("quotagate.settlements", "Settlements of reserved costs, by policy and result (refund, charge, exact, missing).", 1,
		labelPolicy.String("transfers"), labelResult.String(SettleRefund))
	add("quotagate.settled.units", "Units given back (refund) or taken beyond the reservation (charge) by settlements, by policy.", 4,
		labelPolicy.String("transfers"), labelDirection.String(DirectionRefund))

	got, want := collect(t, cells), collect(t, reference)
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("%s not exported", name)
			continue
		}
		if g.Description != w.Description || g.Unit != w.Unit {
			t.Errorf("%s: description %q unit %q, want %q and %q", name, g.Description, g.Unit, w.Description, w.Unit)
		}
		gs, gp := sumPoints(t, g)
		ws, wp := sumPoints(t, w)
		if gs.IsMonotonic != ws.IsMonotonic || gs.Temporality != ws.Temporality {
			t.Errorf("%s: monotonic %v temporality %v, want %v and %v", name, gs.IsMonotonic, gs.Temporality, ws.IsMonotonic, ws.Temporality)
		}
		if len(gp) != len(wp) {
			t.Errorf("%s: %d points, want %d", name, len(gp), len(wp))
		}
		for k, v := range wp {
			if gv, ok := gp[k]; !ok || gv != v {
				t.Errorf("%s%v = %d (present %v), want %d", name, k, gv, ok, v)
			}
		}
	}
}

// TestAsyncCounterPastItsLimit: cells past the lookup map's limit are kept
// and exported like the others, and each key keeps one cell.
func TestAsyncCounterPastItsLimit(t *testing.T) {
	ctx := context.Background()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(ctx) })
	meter := mp.Meter("test")
	c, err := newAsyncCounter(meter, "test.count", "", func(k int) attribute.Set {
		return attribute.NewSet(attribute.Int("k", k))
	})
	if err != nil {
		t.Fatal(err)
	}
	c.cells.limit = 2
	if err := observeCounters(meter, c); err != nil {
		t.Fatal(err)
	}
	for k := range 5 {
		for range k + 1 {
			c.add(k, 1)
		}
	}
	c.add(4, -3) // a counter never goes back
	if n := c.cells.fast.size(); n != 2 {
		t.Errorf("lookup map holds %d cells, want 2", n)
	}
	again := c.cell(4)
	if again != c.cell(4) || c.cells.size() != 5 {
		t.Errorf("%d cells for 5 keys, or a key past the limit got a new cell", c.cells.size())
	}
	_, points := sumPoints(t, collect(t, r)["test.count"])
	for k := range 5 {
		set := attribute.NewSet(attribute.Int("k", k))
		if v := points[set.Equivalent()]; v != int64(k+1) {
			t.Errorf("k=%d: %d, want %d", k, v, k+1)
		}
	}
}

// TestCountersCardinalityLimitByFirstCount: past the SDK's cardinality
// limit, the series that keep their attributes are the first ones counted
// in, as with a synchronous counter, not the first ones whose handle was
// made: a config load makes every policy's handles before any request, and
// a series exported under its attributes must not later move into the
// overflow series because a series made earlier got its first count.
func TestCountersCardinalityLimitByFirstCount(t *testing.T) {
	ctx := context.Background()
	cells, reference := sdkmetric.NewManualReader(), sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(cells), sdkmetric.WithCardinalityLimit(3))
	t.Cleanup(func() { _ = mp.Shutdown(ctx) })
	m, err := NewMetrics(mp)
	if err != nil {
		t.Fatal(err)
	}
	rp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reference), sdkmetric.WithCardinalityLimit(3))
	t.Cleanup(func() { _ = rp.Shutdown(ctx) })
	ref, err := rp.Meter(InstrumentationName).Int64Counter("quotagate.decisions")
	if err != nil {
		t.Fatal(err)
	}
	set := func(policy string) attribute.Set {
		return attribute.NewSet(labelPolicy.String(policy), labelStage.String("global"), labelResult.String(ResultAllowed))
	}
	series := map[string]DecisionSeries{}
	names := map[attribute.Distinct]string{overflowSet.Equivalent(): "overflow"}
	for _, policy := range []string{"a", "b", "c", "d"} { // as a config load does
		series[policy] = m.DecisionSeries(policy, "global", ResultAllowed)
		s := set(policy)
		names[s.Equivalent()] = policy
	}
	for _, policy := range []string{"d", "c", "b", "a", "d"} {
		m.CountDecision(series[policy])
		ref.Add(ctx, 1, metric.WithAttributeSet(set(policy)))
		_, got := sumPoints(t, collect(t, cells)["quotagate.decisions"])
		_, want := sumPoints(t, collect(t, reference)["quotagate.decisions"])
		if len(got) != len(want) {
			t.Errorf("after counting in %s: %d points, want %d", policy, len(got), len(want))
		}
		for k, v := range want {
			if g, ok := got[k]; !ok || g != v {
				t.Errorf("after counting in %s: series %s = %d (present %v), want %d", policy, names[k], g, ok, v)
			}
		}
	}
}
