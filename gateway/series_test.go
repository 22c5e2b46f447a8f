package gateway

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/quotagate/quotagate/config"
)

// TestMetricsRecordTheRequestSeries checks the series an admitted or
// locally denied request records in, which the request path resolves once
// per configuration: every count lands under its own attributes (stage-1
// decisions, the decision durations of both stages, the store call, the
// upstream duration by route, the policies' global decisions).
func TestMetricsRecordTheRequestSeries(t *testing.T) {
	o := newObservedFixture(t)
	for range 6 { // anonymous tier: stage 1 admits a burst of 5 and denies the 6th
		o.do("GET", "/v1/transfers/1", nil, nil)
	}
	families := o.scrape(t)
	value := func(name string, labels map[string]string) float64 {
		t.Helper()
		return seriesValue(families, name, labels)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"quotagate_decisions_total", map[string]string{"policy": "local", "stage": "local", "result": "allowed"}, 5},
		{"quotagate_decisions_total", map[string]string{"policy": "local", "stage": "local", "result": "denied"}, 1},
		{"quotagate_decisions_total", map[string]string{"policy": "tenant", "stage": "global", "result": "allowed"}, 5},
		{"quotagate_decision_duration_seconds", map[string]string{"stage": "local"}, 6},
		{"quotagate_decision_duration_seconds", map[string]string{"stage": "global"}, 5},
		{"quotagate_store_call_duration_seconds", map[string]string{"op": "decide"}, 5},
		{"quotagate_upstream_duration_seconds", map[string]string{"route": "transfers.get"}, 5},
		{"quotagate_requests_total", map[string]string{"route": "transfers.get", "code": "200"}, 5},
	} {
		if got := value(c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// seriesValue is the value of the series of family name whose labels are
// exactly labels: a counter's value, or a histogram's sample count; 0 when
// there is no such series.
func seriesValue(families map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	var sum float64
	for _, m := range families[name].GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		if len(have) != len(labels) {
			continue
		}
		match := true
		for k, v := range labels {
			match = match && have[k] == v
		}
		if match {
			if families[name].GetType() == dto.MetricType_HISTOGRAM {
				sum += float64(m.GetHistogram().GetSampleCount())
			} else {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// counted is one counter series and how many a test expects in it.
type counted struct {
	name   string
	labels map[string]string
	want   float64
}

// checkCounted scrapes o's /metrics and compares each series of want,
// counters.
func checkCounted(t *testing.T, o *observed, when string, want []counted) {
	t.Helper()
	checkSeries(t, o, when, dto.MetricType_COUNTER, want)
}

// checkSeries scrapes o's /metrics and compares each series of want,
// whose families are of type typ (for a histogram, its sample count).
func checkSeries(t *testing.T, o *observed, when string, typ dto.MetricType, want []counted) {
	t.Helper()
	families := o.scrape(t)
	for _, c := range want {
		if f := families[c.name]; f.GetType() != typ {
			t.Errorf("%s: %s is %v, want %v", when, c.name, f.GetType(), typ)
		}
		if got := seriesValue(families, c.name, c.labels); got != c.want {
			t.Errorf("%s: %s%v = %v, want %v", when, c.name, c.labels, got, c.want)
		}
	}
}

// TestCountersScrapeEveryRequest sends N requests of each kind and finds
// exactly N in each request-path counter of the real Prometheus handler,
// under its own attributes: requests by route and code, decisions of stage 1
// and of the global stage (allowed, denied, and a shadow policy's
// shadow_denied).
func TestCountersScrapeEveryRequest(t *testing.T) {
	o := newObservedFixture(t)
	const n = 7
	for range n {
		if w := o.do("GET", "/v1/transfers/1", bearer(enterpriseKey), nil); w.Code != 200 {
			t.Fatalf("enterprise GET: %d", w.Code)
		}
		o.do("GET", "/v1/audit", bearer(enterpriseKey), nil) // shadow: 5 allowed, then shadow_denied
		o.do("GET", "/v1/transfers/2", nil, nil)             // anonymous: stage 1 admits 5, denies 2
	}
	checkCounted(t, o, "after 7 requests of each kind", []counted{
		{"quotagate_requests_total", map[string]string{"route": "transfers.get", "code": "200"}, n + 5},
		{"quotagate_requests_total", map[string]string{"route": "transfers.get", "code": "429"}, 2},
		{"quotagate_requests_total", map[string]string{"route": "audit.get", "code": "200"}, n},
		{"quotagate_decisions_total", map[string]string{"policy": "tenant", "stage": "global", "result": "allowed"}, n + 5},
		{"quotagate_decisions_total", map[string]string{"policy": "audit", "stage": "global", "result": "allowed"}, 5},
		{"quotagate_decisions_total", map[string]string{"policy": "audit", "stage": "global", "result": "shadow_denied"}, n - 5},
		{"quotagate_decisions_total", map[string]string{"policy": "local", "stage": "local", "result": "allowed"}, 5},
		{"quotagate_decisions_total", map[string]string{"policy": "local", "stage": "local", "result": "denied"}, 2},
		{"quotagate_decisions_total", map[string]string{"policy": "tenant", "stage": "global", "result": "denied"}, 0},
	})
}

// TestCountersKeepTheirCountsAcrossAReload counts requests before a reload
// and after it: every series shows their sum, the series of a policy whose
// limits changed goes on from its count, and the series of a route the
// reload dropped keeps its count (a counter never goes back).
func TestCountersKeepTheirCountsAcrossAReload(t *testing.T) {
	o := newObservedFixture(t)
	const before, after = 4, 3
	requestsBeforeReload(t, o, before)
	reloadWithoutAudit(t, o)
	requests := map[string]string{"route": "transfers.get", "code": "200"}
	allowed := map[string]string{"policy": "tenant", "stage": "global", "result": "allowed"}
	audit := map[string]string{"route": "audit.get", "code": "200"}
	checkCounted(t, o, "right after the reload", []counted{
		{"quotagate_requests_total", requests, before},
		{"quotagate_decisions_total", allowed, before},
		{"quotagate_requests_total", audit, before},
	})
	for range after {
		if w := o.do("GET", "/v1/transfers/1", bearer(enterpriseKey), nil); w.Code != 200 {
			t.Fatalf("GET after the reload: %d", w.Code)
		}
	}
	checkCounted(t, o, "after the requests of both configurations", []counted{
		{"quotagate_requests_total", requests, before + after},
		{"quotagate_decisions_total", allowed, before + after},
		{"quotagate_requests_total", audit, before},
		{"quotagate_config_reloads_total", map[string]string{"result": "ok"}, 1},
	})
}

// TestCounterSeriesAreThoseCountedOrPrimed: resolving a configuration's
// series handles exports nothing of its own. A fresh gateway's decision and
// request counters hold exactly the series priming lists (no shadow_denied
// series for a policy that is not shadowed, though every bound policy has
// a handle for it), and requests add only the series they count in.
func TestCounterSeriesAreThoseCountedOrPrimed(t *testing.T) {
	o := newObservedFixture(t)
	primed := metricSeries(o.gw.Config())
	want := map[string]bool{}
	for _, d := range primed.Decisions {
		want["policy="+d[0]+",result="+d[2]+",stage="+d[1]] = true
	}
	for _, r := range primed.Routes {
		for _, c := range primed.Codes {
			want["code="+strconv.Itoa(c)+",route="+r] = true
		}
	}
	check := func(when string) {
		t.Helper()
		got := map[string]bool{}
		families := o.scrape(t)
		for _, name := range []string{"quotagate_decisions_total", "quotagate_requests_total"} {
			for _, m := range families[name].GetMetric() {
				var kv []string
				for _, lp := range m.GetLabel() {
					kv = append(kv, lp.GetName()+"="+lp.GetValue())
				}
				got[strings.Join(kv, ",")] = true
			}
		}
		for k := range got {
			if !want[k] {
				t.Errorf("%s: series {%s} exported, neither primed nor counted", when, k)
			}
		}
		for k := range want {
			if !got[k] {
				t.Errorf("%s: series {%s} missing", when, k)
			}
		}
	}
	check("fresh")
	if w := o.do("GET", "/v1/transfers/1", bearer(enterpriseKey), nil); w.Code != 200 {
		t.Fatalf("GET: %d", w.Code)
	}
	if w := o.do("GET", "/v1/dead", bearer(enterpriseKey), nil); w.Code != 502 {
		t.Fatalf("dead upstream: %d", w.Code)
	}
	want["code=502,route=dead.get"] = true
	check("after two requests")
}

// requestsBeforeReload sends n enterprise requests to each of the routes
// transfers.get and audit.get, which must be admitted.
func requestsBeforeReload(t *testing.T, o *observed, n int) {
	t.Helper()
	for range n {
		if w := o.do("GET", "/v1/transfers/1", bearer(enterpriseKey), nil); w.Code != 200 {
			t.Fatalf("GET before the reload: %d", w.Code)
		}
		if w := o.do("GET", "/v1/audit", bearer(enterpriseKey), nil); w.Code != 200 {
			t.Fatalf("audit GET before the reload: %d", w.Code)
		}
	}
}

// reloadWithoutAudit reloads o's configuration with the enterprise tier's
// limit changed and route audit.get removed.
func reloadWithoutAudit(t *testing.T, o *observed) {
	t.Helper()
	text, err := os.ReadFile(o.path)
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(text), "enterprise: {rate: 100, per: 1s, burst: 100}", "enterprise: {rate: 50, per: 1s, burst: 100}", 1)
	changed = strings.Replace(changed, `  - {name: audit.get, method: GET, path: "/v1/audit", upstream: payments, policies: [audit]}`+"\n", "", 1)
	if changed == string(text) {
		t.Fatal("the configuration did not change")
	}
	if err := os.WriteFile(o.path, []byte(changed), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := o.gw.ReloadFile(o.path); err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(o.gw.Config().Routes, func(r config.Route) bool { return r.Name == "audit.get" }) {
		t.Fatal("the reload kept route audit.get")
	}
}

// TestHistogramsKeepTheirCountsAcrossAReload records requests before a
// reload and after it in the request path's histograms: the global stage's
// decision duration, the store's decide call and the route's upstream
// duration go on from their counts in the new configuration's series
// handles, and the upstream series of a route the reload dropped keeps its
// count, as the SDK's histograms did.
func TestHistogramsKeepTheirCountsAcrossAReload(t *testing.T) {
	o := newObservedFixture(t)
	const before, after = 4, 3
	requestsBeforeReload(t, o, before)
	global := map[string]string{"stage": "global"}
	decide := map[string]string{"op": "decide"}
	transfers := map[string]string{"route": "transfers.get"}
	audit := map[string]string{"route": "audit.get"}
	histogram := dto.MetricType_HISTOGRAM
	checkSeries(t, o, "before the reload", histogram, []counted{
		{"quotagate_decision_duration_seconds", global, 2 * before},
		{"quotagate_store_call_duration_seconds", decide, 2 * before},
		{"quotagate_upstream_duration_seconds", transfers, before},
		{"quotagate_upstream_duration_seconds", audit, before},
	})
	reloadWithoutAudit(t, o)
	for range after {
		if w := o.do("GET", "/v1/transfers/1", bearer(enterpriseKey), nil); w.Code != 200 {
			t.Fatalf("GET after the reload: %d", w.Code)
		}
	}
	checkSeries(t, o, "after the requests of both configurations", histogram, []counted{
		{"quotagate_decision_duration_seconds", global, 2*before + after},
		{"quotagate_store_call_duration_seconds", decide, 2*before + after},
		{"quotagate_upstream_duration_seconds", transfers, before + after},
		{"quotagate_upstream_duration_seconds", audit, before},
	})
}
