package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
)

// gateway is one running quotagate process.
type gateway struct {
	t       testing.TB
	name    string
	proc    *proctest.Proc
	cfgPath string
	// URL is the public listener ("http://127.0.0.1:port"), Admin the admin
	// listener, Addr the public host:port: the addresses the process bound.
	URL, Admin, Addr string
	logs             logBuffer
}

// logBuffer is the process's output (proctest.Logs) with the e2e suite's
// lower-case helpers.
type logBuffer struct{ *proctest.Logs }

// count returns how many times s occurs in the output.
func (l logBuffer) count(s string) int { return l.Count(s) }

// gatewayOpt adjusts how a gateway process is started.
type gatewayOpt func(*proctest.Options)

// withArgs adds command-line arguments after -config.
func withArgs(args ...string) gatewayOpt {
	return func(o *proctest.Options) { o.Args = append(o.Args, args...) }
}

// withEnv adds an environment variable ("NAME=value") to the gateway
// process's environment (proctest.Environ: the test's, without QUOTAGATE_*
// and OTEL_* variables).
func withEnv(kv string) gatewayOpt {
	return func(o *proctest.Options) {
		if o.Env == nil {
			o.Env = proctest.Environ()
		}
		o.Env = append(o.Env, kv)
	}
}

// startGateway writes cfg to a temporary file, starts the binary on it and
// waits until it is ready. The file watcher is off (-watch-interval 0):
// reloads happen on SIGHUP only, so a test knows how many it caused. The
// process is stopped (SIGTERM, then SIGKILL) when t ends, and its log is
// printed if t failed.
func startGateway(t testing.TB, name string, cfg *gwConfig, opts ...gatewayOpt) *gateway {
	t.Helper()
	g := launchGateway(t, name, cfg, opts...)
	g.proc.WaitReady(0)
	return g
}

// startGateways starts n gateways on the same config concurrently.
func startGateways(t testing.TB, n int, cfg *gwConfig, opts ...gatewayOpt) []*gateway {
	t.Helper()
	gws := make([]*gateway, n)
	for i := range gws {
		gws[i] = launchGateway(t, fmt.Sprintf("gw%d", i), cfg, opts...)
	}
	for _, g := range gws {
		g.proc.WaitReady(0)
	}
	return gws
}

// launchGateway starts the process and waits until it has logged the
// addresses it bound, not for readiness. The config's listeners are
// normally port 0; the gateway picks the ports.
func launchGateway(t testing.TB, name string, cfg *gwConfig, opts ...gatewayOpt) *gateway {
	t.Helper()
	return launchGatewayBin(t, proctest.Binary(t), name, cfg, opts...)
}

// launchGatewayBin is launchGateway of the binary at bin.
func launchGatewayBin(t testing.TB, bin, name string, cfg *gwConfig, opts ...gatewayOpt) *gateway {
	t.Helper()
	g := &gateway{t: t, name: name, cfgPath: filepath.Join(t.TempDir(), "config.yaml")}
	cfg.write(t, g.cfgPath)
	o := proctest.Options{Name: name, Args: []string{"-config", g.cfgPath, "-watch-interval", "0"}}
	for _, opt := range opts {
		opt(&o)
	}
	g.proc = proctest.Start(t, bin, o)
	g.logs = logBuffer{g.proc.Logs}
	g.Addr, g.URL, g.Admin = g.proc.Listen, g.proc.URL(), g.proc.AdminURL()
	return g
}

// pollReady reports whether /readyz answered 200 within timeout.
func (g *gateway) pollReady(timeout time.Duration) bool {
	_, ok := g.proc.PollReady(timeout)
	return ok
}

func (g *gateway) exited() bool { return g.proc.Exited() }

// reload rewrites the gateway's config file with cfg and sends SIGHUP.
func (g *gateway) reload(cfg *gwConfig) {
	g.t.Helper()
	g.writeConfig(cfg)
	g.hup()
}

// configJSON returns cfg as the gateway's config file would hold it.
func (g *gateway) configJSON(cfg *gwConfig) string {
	g.t.Helper()
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		g.t.Fatal(err)
	}
	return string(b)
}

// writeConfig rewrites the config file with cfg, without signalling. The
// listeners keep the ports they bound (a reload does not move them).
func (g *gateway) writeConfig(cfg *gwConfig) {
	g.t.Helper()
	cfg.write(g.t, g.cfgPath)
}

// hup sends SIGHUP.
func (g *gateway) hup() {
	g.t.Helper()
	g.proc.Signal(syscall.SIGHUP)
}

// metrics scrapes /metrics and returns its samples.
func (g *gateway) metrics() (samples, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(g.Admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics answered %s", resp.Status)
	}
	return parseMetrics(resp.Body)
}

// metric returns the sum of the samples of name whose labels include
// every label of want ("k=v" pairs).
func (g *gateway) metric(name string, want ...string) float64 {
	g.t.Helper()
	s, err := g.metrics()
	if err != nil {
		g.t.Fatalf("%s: scraping metrics: %v", g.name, err)
	}
	return s.sum(name, want...)
}

// waitMetric polls /metrics until the metric reaches at least min, or fails
// t after timeout.
func (g *gateway) waitMetric(timeout time.Duration, min float64, name string, want ...string) {
	g.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if v := g.metric(name, want...); v >= min {
			return
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("%s: %s%v stayed below %v for %v", g.name, name, want, min, timeout)
		}
		time.Sleep(20 * time.Millisecond) // polling an external process
	}
}

// liveHeapKB returns the gateway's live heap in KiB: its heap in use
// right after a collection, from the admin listener's heap profile (the
// config must set server.pprof). Unlike the resident size it does not
// count garbage the collector has not yet reclaimed, which the heap floor
// lets grow to 64 MiB.
func (g *gateway) liveHeapKB() int64 {
	g.t.Helper()
	resp, err := http.Get(g.Admin + "/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		g.t.Fatalf("%s: heap profile: %v", g.name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`# HeapAlloc = (\d+)`).FindSubmatch(b)
	if resp.StatusCode != http.StatusOK || m == nil {
		g.t.Fatalf("%s: heap profile %d without HeapAlloc: %.200q", g.name, resp.StatusCode, b)
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n >> 10
}
