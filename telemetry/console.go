package telemetry

import (
	"go.opentelemetry.io/otel/attribute"
)

// Values of the action label of quotagate_console_actions_total: what an
// operator did to a tenant's store key from the admin console.
const (
	// ConsoleReset: the key was filled back to its capacity, debt and all.
	ConsoleReset = "reset"
	// ConsoleGrant: units were given to the key, up to its capacity.
	ConsoleGrant = "grant"
)

// Values of the result label of quotagate_console_actions_total.
const (
	// ConsoleApplied: the store applied the action.
	ConsoleApplied = "applied"
	// ConsoleRefused: the action was refused before any store call (no
	// reason given, an unknown tenant or policy, a concurrency policy, ...).
	ConsoleRefused = "refused"
	// ConsoleFailed: the store call failed; nothing is known to have
	// changed.
	ConsoleFailed = "failed"
)

var (
	consoleActions = []string{ConsoleReset, ConsoleGrant}
	consoleResults = []string{ConsoleApplied, ConsoleRefused, ConsoleFailed}
)

const labelAction attribute.Key = "action"

// initConsole creates quotagate_console_actions_total with every action's
// and result's series at 0, in cells (see asyncCounter) with a callback
// of its own.
func (m *Metrics) initConsole() error {
	c, err := newAsyncCounter(m.meter, "quotagate.console.actions",
		"Actions taken on a tenant's store key from the admin console, by action (reset, grant) and result (applied, refused, failed).",
		func(k [2]string) attribute.Set {
			return attribute.NewSet(labelAction.String(k[0]), labelResult.String(k[1]))
		})
	if err != nil {
		return err
	}
	for _, a := range consoleActions {
		for _, r := range consoleResults {
			c.add([2]string{a, r}, 0)
		}
	}
	m.consoleActions = c
	return observeCounters(m.meter, c)
}

// ConsoleAction counts one console action in
// quotagate_console_actions_total; action is ConsoleReset or ConsoleGrant,
// result one of ConsoleApplied, ConsoleRefused, ConsoleFailed (other
// values are not counted).
func (m *Metrics) ConsoleAction(action, result string) {
	if m == nil || m.consoleActions == nil {
		return
	}
	if !contains(consoleActions, action) || !contains(consoleResults, result) {
		return
	}
	m.consoleActions.add([2]string{action, result}, 1)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// ConsoleTotals is what the admin console's history samples of the
// gateway's own counters: their totals since the start, read from the
// cells that /metrics exports, so that the history and a scrape agree.
type ConsoleTotals struct {
	// Decisions is quotagate_decisions_total of every stage but "local"
	// (stage 1 is not a store decision) and every result; Denied is those
	// of result denied.
	Decisions, Denied int64
	// LocalDenied is quotagate_decisions_total{stage="local",result="denied"}.
	LocalDenied int64
	// Fallbacks is quotagate_store_fallback_total, every policy and mode.
	Fallbacks int64
	// StoreErrors is quotagate_store_errors_total, every kind.
	StoreErrors int64
	// StoreDecide is the bucket counts of
	// quotagate_store_call_duration_seconds{op="decide"}, non-cumulative:
	// StoreDecide[i] counts the calls of at most StoreCallBounds()[i]
	// seconds (and more than the bound before), the last those above
	// every bound.
	StoreDecide []uint64
}

// StoreCallBounds returns the upper bounds, in seconds, of the buckets of
// quotagate_store_call_duration_seconds (a new slice).
func StoreCallBounds() []float64 { return append([]float64(nil), latencyBuckets...) }

// ConsoleTotals reads the totals the console's history samples. It costs
// one pass over the series of the counters it reads; a nil Metrics reads
// zeros.
func (m *Metrics) ConsoleTotals() ConsoleTotals {
	var t ConsoleTotals
	if m == nil {
		t.StoreDecide = make([]uint64, len(latencyBuckets)+1)
		return t
	}
	m.decisions.cells.each(func(k [3]string, c *counterCell) {
		n := c.n.Load()
		switch {
		case k[1] == "local":
			if k[2] == ResultDenied {
				t.LocalDenied += n
			}
		default:
			t.Decisions += n
			if k[2] == ResultDenied {
				t.Denied += n
			}
		}
	})
	m.storeFallback.cells.each(func(_ [2]string, c *counterCell) { t.Fallbacks += c.n.Load() })
	m.storeErrors.cells.each(func(_ string, c *counterCell) { t.StoreErrors += c.n.Load() })
	decide := m.storeCall.cell("decide")
	t.StoreDecide = make([]uint64, len(decide.counts))
	for i := range decide.counts {
		t.StoreDecide[i] = decide.counts[i].Load()
	}
	return t
}
