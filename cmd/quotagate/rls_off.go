//go:build norls

package main

import (
	"errors"
	"log/slog"

	"go.opentelemetry.io/otel/trace"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/gateway"
	"github.com/quotagate/quotagate/telemetry"
)

// errNoRLS is the answer of a build without the decision service to a
// configuration that turns it on.
var errNoRLS = errors.New("rls: this build has no decision service (built with -tags norls)")

// checkRLSFiles refuses an rls section this build cannot serve.
func checkRLSFiles(*config.Config) error { return errNoRLS }

// startRLS refuses an rls section this build cannot serve.
func startRLS(cfg *config.Config, _ gateway.OpenStore, _ *slog.Logger, _ *telemetry.Metrics, _ trace.TracerProvider, _ func(string) (string, bool)) (*decisionService, error) {
	if cfg.RLS.Enabled() {
		return nil, errNoRLS
	}
	return nil, nil
}
