package telemetry

import (
	"strings"
	"testing"
)

// TestExtraProducers: OTEL_METRICS_PRODUCERS adds the producers autoexport
// knows to the readers Setup builds, once each; another name is an error
// that names the variable.
func TestExtraProducers(t *testing.T) {
	for _, tc := range []struct {
		env     string
		options int
		fails   bool
	}{
		{"", 0, false},
		{"none", 0, false},
		{"prometheus", 1, false},
		{"prometheus,none,prometheus", 1, false},
		{"prometheus,statsd", 0, true},
	} {
		t.Setenv(envMetricsProducers, tc.env)
		opts, err := extraProducers()
		if tc.fails {
			if err == nil || !strings.Contains(err.Error(), envMetricsProducers) {
				t.Errorf("%q: error %v, want one naming %s", tc.env, err, envMetricsProducers)
			}
			continue
		}
		if err != nil || len(opts) != tc.options {
			t.Errorf("%q: %d options, error %v; want %d", tc.env, len(opts), err, tc.options)
		}
	}
}
