package telemetry

import (
	"context"
	"time"
)

// The series handles below are one attribute combination of an instrument,
// resolved once (when a configuration is compiled) so that recording on
// the request path looks nothing up: Decision, DecisionDuration, StoreCall
// and UpstreamDuration find their cell in a map keyed by their label values
// on every call, and hashing those strings costs several times what the
// cell's atomics do (BenchmarkMetricsDecision, serial against series). A
// handle records exactly what the corresponding method would with the same
// label values.
//
// A DecisionSeries is the counter's cell itself (see asyncCounter): counting
// in it is one atomic add, and every handle of the same label values, from
// any configuration, counts in the same cell. The histograms' handles are
// their cells likewise (see asyncHistogram). Resolving a handle exports
// nothing: its series appears with its first count or recording (or, for
// a counter, Prime).
//
// The zero handle, and any handle of a nil *Metrics, records nothing. A
// handle belongs to the Metrics that made it.

// DecisionSeries is one (policy, stage, result) series of
// quotagate_decisions_total.
type DecisionSeries struct{ c *counterCell }

// StageSeries is one stage series of quotagate_decision_duration_seconds.
type StageSeries struct{ c *histCell }

// OpSeries is one op series of quotagate_store_call_duration_seconds.
type OpSeries struct{ c *histCell }

// RouteSeries is one route series of quotagate_upstream_duration_seconds.
type RouteSeries struct{ c *histCell }

// DecisionSeries returns the series Decision(ctx, policy, stage, result)
// counts in.
func (m *Metrics) DecisionSeries(policy, stage, result string) DecisionSeries {
	if m == nil {
		return DecisionSeries{}
	}
	return DecisionSeries{m.decisions.cell([3]string{policy, stage, result})}
}

// StageSeries returns the series DecisionDuration(ctx, stage, d) records in.
func (m *Metrics) StageSeries(stage string) StageSeries {
	if m == nil {
		return StageSeries{}
	}
	return StageSeries{m.decisionDur.cell(stage)}
}

// OpSeries returns the series StoreCall(ctx, op, d) records in.
func (m *Metrics) OpSeries(op string) OpSeries {
	if m == nil {
		return OpSeries{}
	}
	return OpSeries{m.storeCall.cell(op)}
}

// RouteSeries returns the series UpstreamDuration(ctx, route, d) records in.
func (m *Metrics) RouteSeries(route string) RouteSeries {
	if m == nil {
		return RouteSeries{}
	}
	return RouteSeries{m.upstream.cell(route)}
}

// CountDecision counts one decision in s, as Decision does: one atomic add.
// It takes no context: a counted cell carries no exemplar to draw from one.
func (m *Metrics) CountDecision(s DecisionSeries) {
	if m == nil || s.c == nil {
		return
	}
	s.c.add(1)
}

// RecordDecisionDuration records d in s, as DecisionDuration does.
func (m *Metrics) RecordDecisionDuration(ctx context.Context, s StageSeries, d time.Duration) {
	if m == nil || s.c == nil {
		return
	}
	s.c.record(ctx, seconds(d), m.exemplarMode())
}

// RecordStoreCall records d in s, as StoreCall does.
func (m *Metrics) RecordStoreCall(ctx context.Context, s OpSeries, d time.Duration) {
	if m == nil || s.c == nil {
		return
	}
	s.c.record(ctx, seconds(d), m.exemplarMode())
}

// RecordUpstreamDuration records d in s, as UpstreamDuration does.
func (m *Metrics) RecordUpstreamDuration(ctx context.Context, s RouteSeries, d time.Duration) {
	if m == nil || s.c == nil {
		return
	}
	s.c.record(ctx, seconds(d), m.exemplarMode())
}
