package opscheck

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// query is one PromQL expression of an operator file, with where it is.
type query struct {
	where string
	expr  string
}

// alertRules reads deploy/prometheus/alerts.yaml strictly (the fields of
// Prometheus's rule file format that it uses).
func alertRules(t *testing.T) []query {
	t.Helper()
	b, err := os.ReadFile(repoPath("deploy/prometheus/alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	var out []query
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			where := "alerts.yaml " + r.Alert
			if r.Alert == "" || r.Expr == "" {
				t.Errorf("%s: a rule without alert or expr", where)
			}
			if r.Annotations["summary"] == "" || r.Annotations["runbook"] == "" {
				t.Errorf("%s: want summary and runbook annotations", where)
			}
			if r.Labels["severity"] == "" {
				t.Errorf("%s: no severity label", where)
			}
			out = append(out, query{where, r.Expr})
		}
	}
	return out
}

// dashboardQueries reads deploy/grafana/quotagate.json and returns every
// panel's query and every templating query (label_values(selector, label)
// is Grafana's; its selector is returned as PromQL).
func dashboardQueries(t *testing.T) []query {
	t.Helper()
	b, err := os.ReadFile(repoPath("deploy/grafana/quotagate.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID        string `json:"uid"`
		Title      string `json:"title"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("quotagate.json: %v", err)
	}
	if d.UID == "" || d.Title == "" {
		t.Error("quotagate.json: want a uid and a title")
	}
	var out []query
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Errorf("quotagate.json variable %s: %v", v.Name, err)
			continue
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("quotagate.json variable %s: query %q is not label_values(selector, label)", v.Name, q.Query)
			continue
		}
		out = append(out, query{"quotagate.json variable " + v.Name, fmt.Sprintf("count by (%s) (%s)", m[2], m[1])})
	}
	ids := map[int]bool{}
	for _, raw := range d.Panels {
		var p struct {
			ID      int    `json:"id"`
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatalf("quotagate.json panel: %v", err)
		}
		if ids[p.ID] {
			t.Errorf("quotagate.json: panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("quotagate.json panel %q: no queries", p.Title)
		}
		for _, tg := range p.Targets {
			out = append(out, query{fmt.Sprintf("quotagate.json panel %q %s", p.Title, tg.RefID), tg.Expr})
		}
	}
	return out
}

// grafanaVar matches Grafana's variables in a query.
var grafanaVar = regexp.MustCompile(`\$\{?(\w+)\}?`)

// substituteGrafana replaces Grafana's interval variables with a duration
// and every other variable with a regular expression matching anything, as
// Grafana's "All" would, so that the query parses as PromQL.
func substituteGrafana(expr string) string {
	return grafanaVar.ReplaceAllStringFunc(expr, func(v string) string {
		name := grafanaVar.FindStringSubmatch(v)[1]
		if strings.HasPrefix(name, "__") {
			return "5m"
		}
		return ".*"
	})
}

// scrapeLabels are added by Prometheus to every scraped series.
var scrapeLabels = []string{"job", "instance"}

// exported indexes a scrape: metric name -> label name -> values seen.
type exported map[string]map[string]map[string]bool

func index(ss []series) exported {
	out := exported{}
	for _, s := range ss {
		ls := out[s.name]
		if ls == nil {
			ls = map[string]map[string]bool{}
			out[s.name] = ls
		}
		for k, v := range s.labels {
			if ls[k] == nil {
				ls[k] = map[string]bool{}
			}
			ls[k][v] = true
		}
	}
	return out
}

// checkQuery parses q with the Prometheus parser and checks every metric it
// selects against what the gateway exported: the name exists; every label
// matched on exists on that metric (or is added at scrape); a value matched
// with = was exported, a =~ regular expression matches an exported value;
// every label of by, without, on and ignoring exists on a metric the query
// reads.
func checkQuery(t *testing.T, q query, exp exported) {
	t.Helper()
	p := parser.NewParser(parser.Options{})
	e, err := p.ParseExpr(substituteGrafana(q.expr))
	if err != nil {
		t.Errorf("%s: %v\n%s", q.where, err, q.expr)
		return
	}
	known := map[string]bool{"le": true}
	for _, l := range scrapeLabels {
		known[l] = true
	}
	metrics := 0
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		metrics++
		if vs.Name == "" {
			t.Errorf("%s: a selector without a metric name: %s", q.where, vs)
			return nil
		}
		ls, ok := exp[vs.Name]
		if !ok {
			t.Errorf("%s: metric %s is not exported by the gateway", q.where, vs.Name)
			return nil
		}
		for l := range ls {
			known[l] = true
		}
		for _, m := range vs.LabelMatchers {
			if m.Name == "__name__" || slices.Contains(scrapeLabels, m.Name) {
				continue
			}
			values, ok := ls[m.Name]
			if !ok {
				t.Errorf("%s: %s has no label %q", q.where, vs.Name, m.Name)
				continue
			}
			if m.Type == labels.MatchEqual || m.Type == labels.MatchRegexp {
				seen := false
				for v := range values {
					seen = seen || m.Matches(v)
				}
				if !seen {
					t.Errorf("%s: %s{%s} matches none of the exported values %v", q.where, vs.Name, m, keys(values))
				}
			}
		}
		return nil
	})
	if metrics == 0 {
		t.Errorf("%s: reads no metric", q.where)
	}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		var grouping []string
		switch n := n.(type) {
		case *parser.AggregateExpr:
			grouping = n.Grouping
		case *parser.BinaryExpr:
			if n.VectorMatching != nil {
				grouping = append(grouping, n.VectorMatching.MatchingLabels...)
				grouping = append(grouping, n.VectorMatching.Include...)
			}
		}
		for _, l := range grouping {
			if !known[l] {
				t.Errorf("%s: groups or matches by %q, a label of none of the metrics it reads", q.where, l)
			}
		}
		return nil
	})
}

// TestOperatorQueriesMatchExportedMetrics parses every PromQL expression of
// the alert rules and the dashboard and checks the metrics and labels they
// read against the /metrics of a real gateway: the binary, running the
// Redis overlay's ConfigMap config against a real redis-server, after
// allowed, denied and stage-1 traffic, a reload and a Redis outage
// (SIGSTOP: timeouts, an open breaker, fallbacks), as region eu of a
// global owner (the region metrics).
func TestOperatorQueriesMatchExportedMetrics(t *testing.T) {
	queries := append(alertRules(t), dashboardQueries(t)...)
	if len(queries) < 20 {
		t.Fatalf("found only %d queries; the files were not read as expected", len(queries))
	}

	m := render(t, "deploy/kubernetes/overlays/redis")
	_, c, cfg, data, env := gatewayParts(t, m)
	if cfg.Store.Kind != "redis" {
		t.Fatalf("the overlay's store.kind is %q, want redis", cfg.Store.Kind)
	}
	vol := newConfigMapVolume(t, map[string][]byte{"config.yaml": data})
	redis := startRedis(t)
	env["QUOTAGATE_SERVER_LISTEN"] = "127.0.0.1:0"
	env["QUOTAGATE_SERVER_ADMIN_LISTEN"] = "127.0.0.1:0"
	env["QUOTAGATE_STORE_REDIS_ADDRS"] = redis.addr
	// A region of its own, reporting to a global Redis of its own, so
	// that the region metrics the region alerts read are exported.
	env["QUOTAGATE_STORE_REGION"] = "eu"
	env["QUOTAGATE_STORE_GLOBAL_REDIS_ADDRS"] = startRedis(t).addr
	var envList []string
	for k, v := range env {
		envList = append(envList, k+"="+v)
	}
	g := startGateway(t, configArgs(c.Args, vol.dir+"/config.yaml"), envList)

	send := func(n int, key string) map[int]int {
		codes := map[int]int{}
		for range n {
			req, _ := http.NewRequest(http.MethodGet, "http://"+g.listen+"/v1/transfers/42", nil)
			if key != "" {
				req.Header.Set("Authorization", "Bearer "+key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			codes[resp.StatusCode]++
		}
		return codes
	}
	// Enough enterprise traffic for the hot-key summary (it samples one
	// decision in 16), then an anonymous burst past the "tenant" policy
	// (burst 5) and past the anonymous tier's stage 1 (burst 10).
	if codes := send(200, "demo-enterprise-key"); codes[http.StatusOK] != 200 {
		t.Fatalf("enterprise requests answered %v, want 200 x200", codes)
	}
	if codes := send(20, ""); codes[http.StatusTooManyRequests] == 0 {
		t.Fatalf("anonymous burst answered %v, want some 429s", codes)
	}
	// A reload, rejected: a key the config does not know.
	vol.update(t, map[string][]byte{"config.yaml": append(data, "\nunknown_key: 1\n"...)})
	g.waitFor(t, 30*time.Second, "the rejected reload to show in /metrics", func() (bool, error) {
		return metricValue(g.scrape(t), "quotagate_config_reloads_total", map[string]string{"result": "error"}) >= 1, nil
	})
	// Redis stops answering: timeouts until the breaker opens, then
	// fallbacks at once. Each poll sends one more request, so the breaker
	// keeps failing its probes however slowly this runs.
	if err := redis.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer redis.cmd.Process.Signal(syscall.SIGCONT)
	send(10, "demo-enterprise-key")
	var ss []series
	g.waitFor(t, 30*time.Second, "requests refused by the open breaker to show in /metrics", func() (bool, error) {
		send(1, "demo-enterprise-key")
		ss = g.scrape(t)
		return metricValue(ss, "quotagate_store_errors_total", map[string]string{"kind": "breaker_open"}) >= 1 &&
			metricValue(ss, "quotagate_store_errors_total", map[string]string{"kind": "timeout"}) >= 1, nil
	})
	exp := index(ss)
	for _, q := range queries {
		checkQuery(t, q, exp)
	}
}
