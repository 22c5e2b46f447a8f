package telemetry

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

const (
	labelUpstream attribute.Key = "upstream"
	labelTier     attribute.Key = "tier"
)

// upstreamInstruments are the instruments of the upstream guards: the
// breaker and priority shedding.
type upstreamInstruments struct {
	shed         *asyncCounter[[2]string] // upstream, tier
	breakerState metric.Int64ObservableGauge
	reg          metric.Registration // breaker callback, guarded by Metrics.mu
}

func (m *Metrics) initUpstream() error {
	u := &m.up
	var err error
	u.shed, err = newAsyncCounter(m.meter, "quotagate.shed",
		"Requests shed with 503 overloaded because their upstream was saturated, by upstream and tier.",
		func(k [2]string) attribute.Set {
			return attribute.NewSet(labelUpstream.String(k[0]), labelTier.String(k[1]))
		})
	if err != nil {
		return err
	}
	u.breakerState, err = m.meter.Int64ObservableGauge("quotagate.upstream.breaker.state",
		metric.WithDescription("Upstream circuit breaker state: 0 closed, 1 half-open, 2 open."))
	if err != nil {
		return err
	}
	return nil
}

// Shed counts one request shed in quotagate_shed_total. upstream and tier
// must come from the configuration; n may be 0 to create the series.
func (m *Metrics) Shed(ctx context.Context, upstream, tier string, n int64) {
	if m == nil {
		return
	}
	m.up.shed.add([2]string{upstream, tier}, n)
}

// ObserveUpstreamBreakers registers the callback that reports
// quotagate_upstream_breaker_state{upstream} (BreakerClosed,
// BreakerHalfOpen, BreakerOpen) at each collection. states calls yield once
// per upstream that has a breaker; it should read the current pipeline so
// that a reload needs no new registration. Calling it again replaces the
// previous function; nil removes it.
func (m *Metrics) ObserveUpstreamBreakers(states func(yield func(upstream string, state int64))) error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.up.reg != nil {
		if err := m.up.reg.Unregister(); err != nil {
			return fmt.Errorf("telemetry: replacing upstream breaker callback: %w", err)
		}
		m.up.reg = nil
	}
	if states == nil {
		return nil
	}
	reg, err := m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		states(func(upstream string, state int64) {
			o.ObserveInt64(m.up.breakerState, state, metric.WithAttributeSet(attribute.NewSet(labelUpstream.String(upstream))))
		})
		return nil
	}, m.up.breakerState)
	if err != nil {
		return fmt.Errorf("telemetry: registering upstream breaker callback: %w", err)
	}
	m.up.reg = reg
	return nil
}
