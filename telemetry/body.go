package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Reasons of quotagate_body_timeouts_total: how a request body's deadline
// ended it (see config.Server.BodyReadTimeout and BodyMinRate).
const (
	BodyIdle            = "idle"             // no byte for body_read_timeout
	BodyMinRate         = "min_rate"         // slower than body_min_rate
	BodyUpstreamTimeout = "upstream_timeout" // the upstream's timeout passed while the body was awaited
)

// labelReason is the reason of a body timeout.
const labelReason attribute.Key = "reason"

var bodyReasons = []string{BodyIdle, BodyMinRate, BodyUpstreamTimeout}

// bodyInstruments count what callers' request bodies cost: bodies ended by
// a deadline, and bodies not buffered because the gateway's body budget
// was spent. Both are rare, so they are plain synchronous counters.
type bodyInstruments struct {
	timeouts   metric.Int64Counter
	reasonSets map[string][]metric.AddOption
	overBudget metric.Int64Counter
}

func (m *Metrics) initBody() error {
	b := &m.body
	var err error
	b.timeouts, err = m.meter.Int64Counter("quotagate.body.timeouts",
		metric.WithDescription("Requests answered 408 because their body did not arrive in time, by reason: idle (no byte for server.body_read_timeout), min_rate (slower than server.body_min_rate), upstream_timeout (the upstream's timeout passed while the body was awaited)."))
	if err != nil {
		return err
	}
	b.overBudget, err = m.meter.Int64Counter("quotagate.body.over_budget",
		metric.WithDescription("Requests whose body was not buffered to find its reservation because server.body_buffer_bytes was spent; each reserved its route's max."))
	if err != nil {
		return err
	}
	b.reasonSets = make(map[string][]metric.AddOption, len(bodyReasons))
	for _, r := range bodyReasons {
		b.reasonSets[r] = addOptions(attribute.NewSet(labelReason.String(r)))
		b.timeouts.Add(context.Background(), 0, b.reasonSets[r]...)
	}
	b.overBudget.Add(context.Background(), 0)
	return nil
}

// BodyTimeout counts one request body ended by a deadline, for reason (one
// of BodyIdle, BodyMinRate, BodyUpstreamTimeout; others are not counted).
func (m *Metrics) BodyTimeout(ctx context.Context, reason string) {
	if m == nil {
		return
	}
	if o, ok := m.body.reasonSets[reason]; ok {
		m.body.timeouts.Add(ctx, 1, o...)
	}
}

// BodyOverBudget counts one request body not buffered for want of budget.
func (m *Metrics) BodyOverBudget(ctx context.Context) {
	if m == nil {
		return
	}
	m.body.overBudget.Add(ctx, 1)
}
