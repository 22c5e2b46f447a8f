package gateway

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/proxy"
	"github.com/quotagate/quotagate/telemetry"
)

// upstreamShedders builds the shedder of every upstream that configures
// shedding. A shedder whose settings did not change since prev is carried
// over with its limit and the requests it has in flight.
func upstreamShedders(cfg *config.Config, prev *pipeline, o *Options) (map[string]*proxy.Shedder, error) {
	shedders := map[string]*proxy.Shedder{}
	for name, u := range cfg.Upstreams {
		c := u.Shedding
		if c == nil {
			continue
		}
		if prev != nil {
			if old, ok := prev.shedders[name]; ok {
				oo := old.Options()
				if oo.TargetLatency == c.TargetLatency && oo.MinInflight == c.MinInflight && oo.MaxInflight == c.MaxInflight && slices.Equal(oo.Priority, c.Priority) {
					shedders[name] = old
					continue
				}
			}
		}
		s, err := proxy.NewShedder(proxy.ShedderOptions{TargetLatency: c.TargetLatency, Priority: c.Priority,
			MinInflight: c.MinInflight, MaxInflight: c.MaxInflight})
		if err != nil {
			return nil, fmt.Errorf("upstreams.%s.shedding: %w", name, err)
		}
		shedders[name] = s
	}
	return shedders, nil
}

// upstreamGuards builds the circuit breaker of every upstream that
// configures one. A breaker whose settings did not change since prev is
// carried over, so a reload neither closes an open breaker nor forgets a
// run of failures.
func upstreamGuards(cfg *config.Config, prev *pipeline, o *Options) (map[string]*proxy.Breaker, error) {
	breakers := map[string]*proxy.Breaker{}
	for name, u := range cfg.Upstreams {
		if u.Breaker == nil {
			continue
		}
		if prev != nil {
			if old, ok := prev.breakers[name]; ok {
				if oo := old.Options(); oo.Failures == u.Breaker.Failures && oo.Cooldown == u.Breaker.Cooldown {
					breakers[name] = old
					continue
				}
			}
		}
		b, err := proxy.NewBreaker(proxy.BreakerOptions{Failures: u.Breaker.Failures, Cooldown: u.Breaker.Cooldown, Now: o.Now})
		if err != nil {
			return nil, err
		}
		breakers[name] = b
	}
	return breakers, nil
}

// breakerStates calls yield with the breaker state of every upstream of p,
// in name order; an upstream without a breaker is always closed.
func (p *pipeline) breakerStates(yield func(upstream string, state int64)) {
	for _, name := range slices.Sorted(maps.Keys(p.cfg.Upstreams)) {
		st := proxy.BreakerClosed
		if b := p.breakers[name]; b != nil {
			st = b.State()
		}
		yield(name, int64(st))
	}
}

// breakerDetail is the upstreams member of /readyz: each breaker's state by
// upstream name; nil when no upstream has a breaker. An open upstream
// breaker does not make the gateway unready: its other routes still work.
func (p *pipeline) breakerDetail() map[string]string {
	if len(p.breakers) == 0 {
		return nil
	}
	d := make(map[string]string, len(p.breakers))
	for name, b := range p.breakers {
		d[name] = b.State().String()
	}
	return d
}

// callerTier is upstreamObserver.Tier: the tier the identity stage found.
func callerTier(in *http.Request) string {
	if st := stateFrom(in.Context()); st != nil {
		return st.caller.Tier
	}
	return ""
}

// primeShed creates quotagate_shed_total at zero for every upstream and
// tier, so that a rate or an alert has a series before the first shed.
func primeShed(m *telemetry.Metrics, cfg *config.Config) {
	for up := range cfg.Upstreams {
		for tier := range cfg.Tiers {
			m.Shed(context.Background(), up, tier, 0)
		}
	}
}
