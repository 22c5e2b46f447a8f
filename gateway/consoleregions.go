package gateway

import (
	"slices"
	"strings"
	"time"

	"github.com/quotagate/quotagate/ratelimit/regional"
	"github.com/quotagate/quotagate/routes"
	"github.com/quotagate/quotagate/telemetry"
)

// regionStats is what the console asks of the regional layer (package
// ratelimit/regional); the quota endpoint's regionViewer is the other
// half of it.
type regionStats interface {
	Stats() regional.Stats
	KeyStats() []regional.KeyStat
	LeaseTTL() time.Duration
}

// consoleRegions is the "regions" object of GET /console/state, set on an
// instance with store.global: its region, whether it is the region's
// reporter, its partition state, and per cross-region policy (key class)
// what this instance knows of its keys. Rates are units per second.
type consoleRegions struct {
	Region   string `json:"region"`
	Reporter bool   `json:"reporter"`
	// State is "connected" (the region heard from the global owner
	// within lease_ttl), "partitioned" (not within lease_ttl: every key
	// is on its safe share) or "never" (not yet).
	State        string  `json:"state"`
	SinceReportS float64 `json:"since_report_s"` // -1: never
	// SafeDecisions counts the cross-region items this instance decided
	// on a safe share since it started.
	SafeDecisions uint64               `json:"safe_decisions"`
	Classes       []consoleRegionClass `json:"classes"`
}

// consoleRegionClass is one cross-region policy. Keys is the number of
// its keys this instance knows of (decided lately, granted or reported),
// Granted the number holding a live grant and GrantedRate the sum of those
// grants. Demand, Admitted and Utilisation (admitted over granted, at the
// last report) are the reporter's: nil on the other instances of the
// region.
type consoleRegionClass struct {
	Policy      string   `json:"policy"`
	SafeShare   float64  `json:"safe_share"`
	Keys        int      `json:"keys"`
	Granted     int      `json:"granted"`
	GrantedRate float64  `json:"granted_rate"`
	Demand      *float64 `json:"demand_rate"`
	Admitted    *float64 `json:"admitted_rate"`
	Utilisation *float64 `json:"utilisation"`
	// reportedGranted is what the owner granted the policy's keys at the
	// reporter's last report (units per second), for the metrics.
	reportedGranted float64
}

// Partition states of consoleRegions.State.
const (
	regionConnected   = "connected"
	regionPartitioned = "partitioned"
	regionNever       = "never"
)

// consoleRegions returns the regions object of p's store, nil without a
// regional layer. A key is of the first cross-region policy whose pattern
// matches it; a key of none (a policy a reload removed) is left out.
func (p *pipeline) consoleRegions() *consoleRegions {
	out, _ := p.regionState()
	return out
}

// regionState returns the regions object of p's store and the regional
// layer's Stats it was made of; nil without a regional layer. It is the
// one source of the per-policy figures of the console and of the metrics
// (see regionMetrics).
func (p *pipeline) regionState() (*consoleRegions, regional.Stats) {
	layer, _ := p.store.Wrapped().(regionStats)
	if layer == nil {
		return nil, regional.Stats{}
	}
	st := layer.Stats()
	out := &consoleRegions{Region: st.Region, Reporter: st.Reporter, SafeDecisions: st.SafeDecisions,
		SinceReportS: -1, State: regionNever, Classes: []consoleRegionClass{}}
	if st.SinceReport >= 0 {
		out.SinceReportS = st.SinceReport.Seconds()
		out.State = regionConnected
		if st.SinceReport > layer.LeaseTTL() {
			out.State = regionPartitioned
		}
	}
	type class struct {
		pattern routes.KeyPattern
		index   int
	}
	var classes []class
	byName := map[string]int{}
	for _, r := range p.routes {
		r.eachBinding(func(ps []boundPolicy) {
			for i := range ps {
				bp := &ps[i]
				if !bp.region.Leased {
					continue
				}
				n, ok := byName[bp.name]
				if !ok {
					n = len(out.Classes)
					byName[bp.name] = n
					out.Classes = append(out.Classes, consoleRegionClass{Policy: bp.name, SafeShare: bp.region.SafeShare})
				}
				classes = append(classes, class{bp.pattern, n})
			}
		})
	}
	type sums struct{ demand, admitted, granted float64 }
	reported := make([]*sums, len(out.Classes))
	for _, k := range layer.KeyStats() {
		i := slices.IndexFunc(classes, func(c class) bool { return c.pattern.Matches(k.Key) })
		if i < 0 || k.Limit.Per <= 0 {
			continue
		}
		c := &out.Classes[classes[i].index]
		perSecond := float64(time.Second) / float64(k.Limit.Per)
		c.Keys++
		if !k.Grant.None() {
			c.Granted++
			c.GrantedRate += float64(k.Grant.Rate) * perSecond
		}
		if k.Reported {
			s := reported[classes[i].index]
			if s == nil {
				s = &sums{}
				reported[classes[i].index] = s
			}
			s.demand += float64(k.Demand) * perSecond
			s.admitted += float64(k.Admitted) * perSecond
			s.granted += float64(k.Granted) * perSecond
		}
	}
	for i, s := range reported {
		if s == nil {
			continue
		}
		c := &out.Classes[i]
		c.Demand, c.Admitted, c.reportedGranted = &s.demand, &s.admitted, s.granted
		if s.granted > 0 {
			u := s.admitted / s.granted
			c.Utilisation = &u
		}
	}
	slices.SortFunc(out.Classes, func(a, b consoleRegionClass) int { return strings.Compare(a.Policy, b.Policy) })
	return out, st
}

// regionMetrics returns the region's figures for the metrics (see
// telemetry.Metrics.ObserveRegion): the layer's totals, and per
// cross-region policy of the configuration the figures of the console's
// classes and the layer's counters of the policy; false without a
// regional layer.
func (p *pipeline) regionMetrics() (telemetry.RegionStats, bool) {
	c, st := p.regionState()
	if c == nil {
		return telemetry.RegionStats{}, false
	}
	out := telemetry.RegionStats{Region: st.Region, Reporter: st.Reporter, Demand: st.Demand, Admitted: st.Admitted,
		Granted: st.Granted, ReportLatencySeconds: st.ReportLatency.Seconds(), Keys: int64(st.Keys),
		SinceReportSeconds: c.SinceReportS, SafeDecisions: st.SafeDecisions,
		Policies: make([]telemetry.RegionPolicyStats, len(c.Classes))}
	for i, cl := range c.Classes {
		ps := telemetry.RegionPolicyStats{Policy: cl.Policy, Granted: cl.reportedGranted, Keys: int64(cl.Granted),
			SafeDecisions: st.Policies[cl.Policy].SafeDecisions, LeaseExpiries: st.Policies[cl.Policy].LeaseExpiries}
		if cl.Demand != nil {
			ps.Demand, ps.Admitted = *cl.Demand, *cl.Admitted
		}
		out.Policies[i] = ps
	}
	return out, true
}
