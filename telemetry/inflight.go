package telemetry

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Description and Prometheus name of the queue-wait histogram, shared with
// its empty series (Prime).
const (
	descQueueWait = "Time a request waited in a concurrency policy's queue, admitted or not, by policy."
	nameQueueWait = "quotagate_queue_wait_seconds"
)

// slotInstruments are the instruments of concurrency policies.
type slotInstruments struct {
	inflight  metric.Int64ObservableGauge
	queueWait *asyncHistogram[string] // policy
	lost      metric.Int64Counter
	retaken   metric.Int64Counter
	policies  cellSet[string, []metric.AddOption] // policy
	reg       metric.Registration                 // inflight callback, guarded by Metrics.mu
}

func (m *Metrics) initSlots() error {
	s := &m.slots
	var err error
	s.inflight, err = m.meter.Int64ObservableGauge("quotagate.inflight",
		metric.WithDescription("Concurrency slots held by this instance's requests in flight, by policy."))
	if err != nil {
		return err
	}
	s.queueWait = newAsyncHistogram("quotagate.queue.wait", descQueueWait, "s", upstreamBuckets,
		func(p string) attribute.Set { return attribute.NewSet(labelPolicy.String(p)) })
	s.lost, err = m.meter.Int64Counter("quotagate.concurrency.slots.lost",
		metric.WithDescription("Concurrency slots that a renewal found no longer held while their request ran, by policy."))
	if err != nil {
		return err
	}
	s.retaken, err = m.meter.Int64Counter("quotagate.concurrency.slots.retaken",
		metric.WithDescription("Concurrency slots that a renewal found no longer held while their request ran, and took back, by policy."))
	if err != nil {
		return err
	}
	s.policies = newCellSet(func(p string) []metric.AddOption { return addOptions(attribute.NewSet(labelPolicy.String(p))) })
	return nil
}

// QueueWait records in quotagate_queue_wait_seconds{policy} how long a
// request waited in the queue of concurrency policy, which must come from
// the configuration.
func (m *Metrics) QueueWait(ctx context.Context, policy string, d time.Duration) {
	if m == nil {
		return
	}
	m.slots.queueWait.cell(policy).record(ctx, seconds(d), m.exemplarMode())
}

// SlotsLost adds n to quotagate_concurrency_slots_lost_total{policy}: slots
// of concurrency policy (from the configuration) that a renewal found
// expired or gone while their requests still ran.
func (m *Metrics) SlotsLost(ctx context.Context, policy string, n int64) {
	if m == nil {
		return
	}
	m.slots.lost.Add(ctx, n, m.slots.policies.get(policy)...)
}

// SlotsRetaken adds n to quotagate_concurrency_slots_retaken_total{policy}:
// slots of concurrency policy (from the configuration) that a renewal found
// expired or gone while their requests still ran, and took back.
func (m *Metrics) SlotsRetaken(ctx context.Context, policy string, n int64) {
	if m == nil {
		return
	}
	m.slots.retaken.Add(ctx, n, m.slots.policies.get(policy)...)
}

// primeSlots exports the lost-slot and retaken-slot counters of each
// concurrency policy at 0.
func (m *Metrics) primeSlots(ctx context.Context, policies []string) {
	for _, p := range policies {
		opts := m.slots.policies.get(p)
		m.slots.lost.Add(ctx, 0, opts...)
		m.slots.retaken.Add(ctx, 0, opts...)
	}
}

// ObserveInflight registers the callback that reports
// quotagate_inflight{policy} at each collection: held calls yield once per
// concurrency policy with the number of its slots this instance holds (0
// included, so that every configured policy has a series). It should read
// the current pipeline, so that a reload needs no new registration.
// Calling it again replaces the previous function; nil removes it.
func (m *Metrics) ObserveInflight(held func(yield func(policy string, n int64))) error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.slots.reg != nil {
		if err := m.slots.reg.Unregister(); err != nil {
			return fmt.Errorf("telemetry: replacing in-flight callback: %w", err)
		}
		m.slots.reg = nil
	}
	if held == nil {
		return nil
	}
	reg, err := m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		held(func(policy string, n int64) {
			o.ObserveInt64(m.slots.inflight, n, metric.WithAttributeSet(attribute.NewSet(labelPolicy.String(policy))))
		})
		return nil
	}, m.slots.inflight)
	if err != nil {
		return fmt.Errorf("telemetry: registering in-flight callback: %w", err)
	}
	m.slots.reg = reg
	return nil
}
