package telemetry

import (
	"context"
	"slices"
	"sort"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// Series lists the label values a configuration can produce, so that
// Prime can export their series at zero before their first use: a rate or
// an alert then has a series to read from the start, and a scrape of a
// fresh gateway shows every metric family. Values must come from the same
// bounded sets as the recording methods' arguments.
type Series struct {
	// Decisions are (policy, stage, result) of quotagate_decisions_total.
	Decisions [][3]string
	// Fallbacks are (policy, mode) of quotagate_store_fallback_total.
	Fallbacks [][2]string
	// StoreErrors are the kinds of quotagate_store_errors_total.
	StoreErrors []string
	// Routes × Codes label quotagate_requests_total; Routes also label
	// quotagate_upstream_duration_seconds.
	Routes []string
	Codes  []int
	// Stages label quotagate_decision_duration_seconds.
	Stages []string
	// Ops label quotagate_store_call_duration_seconds.
	Ops []string
	// QueuePolicies label quotagate_queue_wait_seconds,
	// quotagate_concurrency_slots_lost_total and
	// quotagate_concurrency_slots_retaken_total: the concurrency policies
	// (with or without a queue).
	QueuePolicies []string
}

// Prime exports every series of s at zero. Counters are added 0, which
// exports their series like any other value (OTLP included). A histogram
// cannot be observed without counting an observation, so its series are
// added, empty, to the Prometheus exposition of the Providers it was
// attached to (Providers.ExportPrimed) until they are first recorded. A
// later Prime replaces the histogram series of the previous one (a reload
// that drops a route stops its empty series); counters stay, with their
// counts, as counters do. Safe for concurrent use.
func (m *Metrics) Prime(s Series) {
	if m == nil {
		return
	}
	ctx := context.Background()
	for _, d := range s.Decisions {
		m.decisions.add(d, 0)
	}
	for _, f := range s.Fallbacks {
		m.storeFallback.add(f, 0)
	}
	for _, k := range s.StoreErrors {
		m.storeErrors.add(k, 0)
	}
	m.primeSlots(ctx, s.QueuePolicies)
	for _, r := range s.Routes {
		for _, c := range s.Codes {
			m.requests.add(routeCode{r, c}, 0)
		}
	}
	fams := []*dto.MetricFamily{
		emptyHistograms(nameDecisionDuration, descDecisionDuration, string(labelStage), s.Stages, latencyBuckets),
		emptyHistograms(nameStoreCallDuration, descStoreCallDuration, string(labelOp), s.Ops, latencyBuckets),
		emptyHistograms(nameUpstreamDuration, descUpstreamDuration, string(labelRoute), s.Routes, upstreamBuckets),
		emptyHistograms(nameQueueWait, descQueueWait, string(labelPolicy), s.QueuePolicies, upstreamBuckets),
	}
	m.primed.Store(&fams)
}

// Prometheus names of the histograms, as the exporter translates them.
const (
	nameDecisionDuration  = "quotagate_decision_duration_seconds"
	nameStoreCallDuration = "quotagate_store_call_duration_seconds"
	nameUpstreamDuration  = "quotagate_upstream_duration_seconds"
)

// emptyHistograms is a histogram family with one empty series per value
// of its one label.
func emptyHistograms(name, help, label string, values []string, bounds []float64) *dto.MetricFamily {
	f := &dto.MetricFamily{Name: proto.String(name), Help: proto.String(help), Type: dto.MetricType_HISTOGRAM.Enum()}
	for _, v := range slices.Compact(slices.Sorted(slices.Values(values))) {
		h := &dto.Histogram{SampleCount: proto.Uint64(0), SampleSum: proto.Float64(0)}
		for _, b := range bounds {
			h.Bucket = append(h.Bucket, &dto.Bucket{UpperBound: proto.Float64(b), CumulativeCount: proto.Uint64(0)})
		}
		f.Metric = append(f.Metric, &dto.Metric{
			Label:     []*dto.LabelPair{{Name: proto.String(label), Value: proto.String(v)}},
			Histogram: h,
		})
	}
	return f
}

// primedGatherer adds to what inner gathers the empty histogram series of
// the attached Metrics that inner does not have yet.
type primedGatherer struct {
	inner   prometheus.Gatherer
	metrics func() *Metrics // nil result: nothing attached
}

func (g primedGatherer) Gather() ([]*dto.MetricFamily, error) {
	fams, err := g.inner.Gather()
	m := g.metrics()
	if m == nil {
		return fams, err
	}
	primed := m.primed.Load()
	if primed == nil {
		return fams, err
	}
	byName := make(map[string]*dto.MetricFamily, len(fams))
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	for _, want := range *primed {
		if len(want.Metric) == 0 {
			continue
		}
		have, ok := byName[want.GetName()]
		if !ok {
			fams = append(fams, proto.Clone(want).(*dto.MetricFamily))
			continue
		}
		seen := make(map[string]bool, len(have.Metric))
		for _, s := range have.Metric {
			seen[labelKey(s)] = true
		}
		for _, s := range want.Metric {
			if !seen[labelKey(s)] {
				have.Metric = append(have.Metric, proto.Clone(s).(*dto.Metric))
			}
		}
		sort.Slice(have.Metric, func(i, j int) bool { return labelKey(have.Metric[i]) < labelKey(have.Metric[j]) })
	}
	sort.Slice(fams, func(i, j int) bool { return fams[i].GetName() < fams[j].GetName() })
	return fams, err
}

// labelKey identifies a series by its label pairs, which a gathered
// family holds sorted by name.
func labelKey(m *dto.Metric) string {
	var k string
	for _, l := range m.GetLabel() {
		k += strconv.Quote(l.GetName()) + "=" + strconv.Quote(l.GetValue()) + ","
	}
	return k
}
