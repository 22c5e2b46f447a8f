package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/internal/redistest"
)

// TestFleetMode runs three in-process instances briefly on a real
// standalone Redis and a real 3-primary Cluster, and checks that no caller
// was admitted beyond its bound and that the report has every column.
func TestFleetMode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis servers")
	}
	standalone := redistest.StartStandalone(t)
	cluster := redistest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	jsonPath := filepath.Join(t.TempDir(), "fleet.json")
	logPath := filepath.Join(t.TempDir(), "instances.log")
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"-mode", "fleet", "-n", "3", "-topology", "standalone,cluster",
		"-redis", standalone.Addr, "-cluster", strings.Join(cluster.Addrs(), ","),
		"-d", "1s", "-c", "8", "-callers", "1000", "-abusive-share", "0.4", "-json", jsonPath, "-instance-log", logPath}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(logPath); err != nil {
		t.Errorf("-instance-log: %v", err)
	}
	var rep FleetReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("report JSON: %v\n%s", err, b)
	}
	if len(rep.Runs) != 2 || rep.Runs[0].Topology != topoStandalone || rep.Runs[1].Topology != topoCluster {
		t.Fatalf("runs: want standalone then cluster, got:\n%s", b)
	}
	for _, r := range rep.Runs {
		if r.Instances != 3 || r.Requests == 0 || r.RPS <= 0 {
			t.Errorf("%s: instances %d, requests %d, rps %v", r.Topology, r.Instances, r.Requests, r.RPS)
		}
		if r.RedisCmds <= 0 || r.RedisCPUus <= 0 || r.RedisMBPer1M <= 0 || r.GatewayMiB <= 0 || r.ProcessCPUus <= 0 || r.GenCPUus <= 0 {
			t.Errorf("%s: a measurement is missing: cmd/req %v, redis µs/req %v, MB/1M %v, gw MiB %v, proc µs/req %v, gen µs/req %v",
				r.Topology, r.RedisCmds, r.RedisCPUus, r.RedisMBPer1M, r.GatewayMiB, r.ProcessCPUus, r.GenCPUus)
		}
		if len(r.Classes) != int(numClasses) {
			t.Fatalf("%s: %d classes, want %d", r.Topology, len(r.Classes), numClasses)
		}
		var calls float64
		for i, c := range r.Classes {
			if c.Class != classNames[i] {
				t.Errorf("%s: class %d is %q, want %q", r.Topology, i, c.Class, classNames[i])
			}
			// The one property that must hold on any machine.
			if c.Over != 0 || c.Admitted > c.Bound {
				t.Errorf("%s %s: over-admitted: admitted %d, bound %d, over %d", r.Topology, c.Class, c.Admitted, c.Bound, c.Over)
			}
			if c.Exact == 0 || c.Exact > c.Requests || c.Keys == 0 {
				t.Errorf("%s %s: exact %d of %d requests from %d callers", r.Topology, c.Class, c.Exact, c.Requests, c.Keys)
			}
			if c.Requests == 0 || c.Admitted+c.Limited+c.Errors != c.Requests {
				t.Errorf("%s %s: requests %d != admitted %d + 429 %d + errors %d", r.Topology, c.Class, c.Requests, c.Admitted, c.Limited, c.Errors)
			}
			if c.Errors > 0 { // the store missed its 1 s deadline: a slow machine, not a wrong answer
				t.Logf("%s %s: %d requests failed closed", r.Topology, c.Class, c.Errors)
			}
			calls += c.StoreCalls * float64(c.Requests)
		}
		if ab := r.Classes[classAbusive]; ab.Requests > ab.Bound && ab.Limited == 0 {
			t.Errorf("%s abusive: %d requests, bound %d, none limited", r.Topology, ab.Requests, ab.Bound)
		}
		// What the clients counted is what Redis counted.
		if got := calls / float64(r.Requests); math.Abs(got-r.RedisScripts) > 0.05 {
			t.Errorf("%s: clients sent %.3f script calls per request, Redis counted %.3f", r.Topology, got, r.RedisScripts)
		}
	}
	table := stdout.String()
	header := "| " + strings.Join(fleetColumns, " | ") + " |"
	if !strings.Contains(table, header) {
		t.Errorf("table lacks the header %q:\n%s", header, table)
	}
	rows := 0
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| standalone |") && !strings.HasPrefix(line, "| cluster |") {
			continue
		}
		rows++
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != len(fleetColumns) {
			t.Errorf("row has %d cells, want %d: %s", len(cells), len(fleetColumns), line)
		}
		for i, c := range cells {
			if strings.TrimSpace(c) == "" {
				t.Errorf("row has no %s: %s", fleetColumns[i], line)
			}
		}
	}
	if rows != 2*int(numClasses) {
		t.Errorf("table has %d rows, want %d:\n%s", rows, 2*numClasses, table)
	}
}

func TestFleetFlagsRejectBadValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-mode", "swarm"}, "-mode"},
		{[]string{"-mode", "fleet", "-n", "0"}, "-n"},
		{[]string{"-mode", "fleet", "-n", "3,x"}, "-n"},
		{[]string{"-mode", "fleet", "-n", ","}, "-n"},
		{[]string{"-mode", "fleet", "-topology", "sentinel"}, "-topology"},
		{[]string{"-mode", "fleet", "-topology", ""}, "-topology"},
		{[]string{"-mode", "fleet", "-callers", "1"}, "-callers"},
		{[]string{"-mode", "fleet", "-enterprise-share", "1.5"}, "-enterprise-share"},
		{[]string{"-mode", "fleet", "-abusive-share", "-0.1"}, "-abusive-share"},
		{[]string{"-mode", "fleet", "-enterprise-share", "0.6", "-abusive-share", "0.6"}, "-abusive-share"},
		{[]string{"-mode", "fleet", "-lease", "sometimes"}, "-lease"},
		{[]string{"-mode", "fleet", "-enterprise-rate", "0"}, "-enterprise-rate"},
		{[]string{"-mode", "fleet", "-c", "0"}, "-c"},
		{[]string{"-mode", "fleet", "-d", "0s"}, "-d"},
	} {
		_, err := parseFlags(tc.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFlags(%q) = %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
	o, err := parseFlags([]string{"-mode", "fleet", "-n", "3, 10,50", "-topology", "cluster,standalone,cluster", "-lease", "auto"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if f := o.fleet; len(f.sizes) != 3 || f.sizes[2] != 50 || strings.Join(f.topologies, ",") != "cluster,standalone" || f.lease != leaseAuto {
		t.Errorf("fleet options %+v", f)
	}
}

func TestDiscardWriterNamesErrors(t *testing.T) {
	w := &discardWriter{h: http.Header{}}
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write([]byte(`{"type":"about:blank","error":"limiter_unavailable",`))
	_, _ = w.Write([]byte(`"status":503}`))
	if got := w.errorKind(); got != "503 limiter_unavailable" {
		t.Errorf("errorKind = %q", got)
	}
	w = &discardWriter{h: http.Header{}}
	w.WriteHeader(http.StatusBadGateway)
	if got := w.errorKind(); got != "502 (no problem body)" {
		t.Errorf("errorKind without a body = %q", got)
	}
	w = &discardWriter{h: http.Header{}}
	_, _ = w.Write([]byte("hello"))
	if w.code != http.StatusOK || len(w.body) != 0 {
		t.Errorf("a 200 answer: code %d, kept %q", w.code, w.body)
	}
	if got := formatCounts(map[string]uint64{"503 b": 2, "502 a": 1}); got != "502 a × 1, 503 b × 2" {
		t.Errorf("formatCounts = %q", got)
	}
}

// TestFleetConfigParses checks that the configuration of every lease mode
// is one the gateway accepts, with the policy leasing as asked.
func TestFleetConfigParses(t *testing.T) {
	for _, lease := range []string{leaseOff, leaseStatic, leaseAuto} {
		cfg, err := config.Parse([]byte(fleetConfig([]string{"127.0.0.1:1", "127.0.0.1:2"}, 10, lease, 100)), fleetGetenv)
		if err != nil {
			t.Errorf("lease %s: %v", lease, err)
			continue
		}
		p, ok := cfg.Policies["user"]
		if !ok {
			t.Fatalf("lease %s: no policy user", lease)
		}
		if (p.Lease != nil) != (lease != leaseOff) {
			t.Errorf("lease %s: policy lease %+v", lease, p.Lease)
		}
		if cfg.Store.FleetSize != 10 || len(cfg.Store.Redis.Addrs) != 2 {
			t.Errorf("lease %s: store %+v", lease, cfg.Store)
		}
	}
}

// TestFleetModeRegions runs -regions 3 at small scale: three instances,
// one per region, each region on a redis-server of its own, the
// enterprise tenant's limit (100/s) one quota across them granted by a
// global redis-server. The enterprise tenant is admitted within the
// connected bound (burst + rate × elapsed for the three regions
// together; within the partition bound if a region decided on its safe
// share), no free or abusive caller beyond its own, and the report has the
// global and regional costs.
func TestFleetModeRegions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis servers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	jsonPath := filepath.Join(t.TempDir(), "fleet.json")
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"-mode", "fleet", "-regions", "3", "-n", "3", "-d", "3s", "-c", "8", "-callers", "1000",
		"-enterprise-share", "0.5", "-enterprise-rate", "100", "-json", jsonPath}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep FleetReport
	if err := json.Unmarshal(b, &rep); err != nil || len(rep.Runs) != 1 {
		t.Fatalf("report: %v\n%s", err, b)
	}
	r := rep.Runs[0]
	g := r.Regions
	if g == nil || g.Regions != 3 || len(g.Instances) != 3 || g.Instances[0]+g.Instances[1]+g.Instances[2] != 3 {
		t.Fatalf("regions %+v, want 3 regions of one instance each", g)
	}
	t.Logf("%d requests at %.0f/s; warm-up %.1f s; global %.1f calls/s, regional %.2f calls/req, %.0f report bytes per interval and region, %d safe-share decisions",
		r.Requests, r.RPS, g.Warmup, g.GlobalCalls, g.RegionalCalls, g.ReportBytes, g.SafeDecisions)
	if g.GlobalCalls <= 0 || g.RegionalCalls <= 0 || g.ReportBytes <= 0 {
		t.Errorf("a cost is missing: %+v", g)
	}
	for _, c := range r.Classes {
		t.Logf("%s: requests %d admitted %d bound %d exact %d over %d util %.3f errors %d", c.Class, c.Requests, c.Admitted, c.Bound, c.Exact, c.Over, c.Utilisation, c.Errors)
		if c.Requests == 0 || c.Admitted == 0 {
			t.Errorf("%s: %d requests, %d admitted", c.Class, c.Requests, c.Admitted)
		}
		if c.Class != classNames[classEnterprise] {
			if c.Over != 0 {
				t.Errorf("%s: over-admitted by %d in its own region", c.Class, c.Over)
			}
			continue
		}
		bound := c.Bound
		if g.SafeDecisions > 0 {
			bound = g.SafeBound
		}
		if c.Admitted > bound {
			t.Errorf("enterprise: admitted %d over its bound %d (connected %d, %d safe-share decisions)", c.Admitted, bound, c.Bound, g.SafeDecisions)
		}
	}
	if !strings.Contains(stdout.String(), "enterprise tenant, one quota across the regions") {
		t.Errorf("the table has no regions part:\n%s", stdout.String())
	}
}
