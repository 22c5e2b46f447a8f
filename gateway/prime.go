package gateway

import (
	"maps"
	"net/http"
	"slices"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/telemetry"
)

// storeErrorKinds are the kind labels storeFailed counts.
var storeErrorKinds = []string{"timeout", "unavailable", "breaker_open", "invalid"}

// metricSeries lists the series cfg's pipeline can record, so that they are
// exported at zero from the start (telemetry.Metrics.Prime): every
// configured policy's global decisions (allowed, denied, error, and
// shadow_denied for a shadow policy; fallback decisions for a policy that
// falls back to its local share) and fallback mode, stage 1's decisions when
// a tier has one, every store error kind, every route's requests at 200 and
// 429 and its upstream latency, and the latency of both stages and of the
// store's decide call (and settle call, when a route settles).
func metricSeries(cfg *config.Config) telemetry.Series {
	s := telemetry.Series{
		StoreErrors: storeErrorKinds,
		Codes:       []int{http.StatusOK, http.StatusTooManyRequests},
		Stages:      []string{"local", "global"},
		Ops:         []string{"decide"},
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Policies)) {
		p := cfg.Policies[name]
		for _, r := range []string{telemetry.ResultAllowed, telemetry.ResultDenied, telemetry.ResultError} {
			s.Decisions = append(s.Decisions, [3]string{name, "global", r})
		}
		if p.Shadow {
			s.Decisions = append(s.Decisions, [3]string{name, "global", telemetry.ResultShadowDenied})
		}
		if p.OnStoreError == ratelimit.OnErrorLocal {
			s.Decisions = append(s.Decisions, [3]string{name, "fallback", telemetry.ResultAllowed}, [3]string{name, "fallback", telemetry.ResultDenied})
		}
		s.Fallbacks = append(s.Fallbacks, [2]string{name, p.OnStoreError.String()})
		if p.Algorithm == ratelimit.Concurrency {
			s.QueuePolicies = append(s.QueuePolicies, name)
		}
	}
	for _, t := range cfg.Tiers {
		if t.Local != nil {
			s.Decisions = append(s.Decisions, [3]string{localPolicy, "local", telemetry.ResultAllowed}, [3]string{localPolicy, "local", telemetry.ResultDenied})
			break
		}
	}
	for _, r := range cfg.Routes {
		s.Routes = append(s.Routes, r.Name)
		if r.Settle != nil && r.Settle.SettleFrom != nil && !slices.Contains(s.Ops, "settle") {
			s.Ops = append(s.Ops, "settle")
		}
	}
	return s
}
