package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds how long a gateway may take to log its listeners and
// answer /readyz 200.
const startTimeout = 20 * time.Second

// gateway is one running quotagate process.
type gateway struct {
	t       testing.TB
	name    string
	cmd     *exec.Cmd
	cfgPath string
	// URL is the public listener ("http://127.0.0.1:port"), Admin the admin
	// listener, Addr the public host:port.
	URL, Admin, Addr string

	listen, adminListen string // the addresses written into every config
	opts                []gatewayOpt

	logs *logBuffer
	done chan struct{} // closed when the process has exited
	exit error         // the process's exit status, set before done closes
}

// gatewayOpt adjusts how a gateway process is started.
type gatewayOpt func(*exec.Cmd)

// withArgs adds command-line arguments after -config.
func withArgs(args ...string) gatewayOpt {
	return func(c *exec.Cmd) { c.Args = append(c.Args, args...) }
}

// startGateway writes cfg to a temporary file, starts the binary on it and
// waits until it is ready. The file watcher is off (-watch-interval 0):
// reloads happen on SIGHUP only, so a test knows how many it caused. The
// process is stopped (SIGTERM, then SIGKILL) when t ends, and its log is
// printed if t failed.
func startGateway(t testing.TB, name string, cfg *gwConfig, opts ...gatewayOpt) *gateway {
	t.Helper()
	g := launchGateway(t, name, cfg, opts...)
	g.waitReady(startTimeout)
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
		g.waitReady(startTimeout)
	}
	return gws
}

// launchGateway starts the process and waits until its admin listener
// answers /healthz, not for readiness. Listeners written as port 0 get free
// ports chosen here; if another process takes one before the gateway binds
// it (the gateway exits 2), the launch is retried with other ports.
func launchGateway(t testing.TB, name string, cfg *gwConfig, opts ...gatewayOpt) *gateway {
	t.Helper()
	dir := t.TempDir()
	for attempt := 1; ; attempt++ {
		g := &gateway{t: t, name: name, cfgPath: filepath.Join(dir, "config.yaml"), logs: newLogBuffer(), done: make(chan struct{}), opts: opts}
		own := cfg.clone(t)
		own.Server.Listen = freeAddr(t, own.Server.Listen)
		own.Server.AdminListen = freeAddr(t, own.Server.AdminListen)
		g.Addr, g.URL, g.Admin = own.Server.Listen, "http://"+own.Server.Listen, "http://"+own.Server.AdminListen
		g.listen, g.adminListen = own.Server.Listen, own.Server.AdminListen
		own.write(t, g.cfgPath)
		g.start()
		if g.pollHealthy(startTimeout) {
			return g
		}
		g.stop()
		if attempt < 3 && strings.Contains(g.logs.String(), "address already in use") {
			continue
		}
		t.Fatalf("%s: /healthz not 200 within %v (exit: %v); log:\n%s", name, startTimeout, g.exit, g.logs.tail(100))
	}
}

// start starts the process on g.cfgPath.
func (g *gateway) start() {
	g.t.Helper()
	cmd := exec.Command(binPath, "-config", g.cfgPath, "-watch-interval", "0")
	cmd.Env = cleanEnv()
	for _, o := range g.opts {
		o(cmd)
	}
	cmd.Stdout, cmd.Stderr = g.logs, g.logs
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		g.t.Fatalf("%s: starting %s: %v", g.name, binPath, err)
	}
	g.cmd = cmd
	go func() {
		g.exit = cmd.Wait()
		close(g.done)
	}()
	g.t.Cleanup(func() {
		g.stop()
		if g.t.Failed() {
			g.t.Logf("---- log of gateway %s (exit: %v), access lines left out ----\n%s", g.name, g.exit, g.logs.digest(80))
		}
	})
}

// freeAddr returns addr, or a free 127.0.0.1 port when addr's port is 0.
func freeAddr(t testing.TB, addr string) string {
	t.Helper()
	if !strings.HasSuffix(addr, ":0") {
		return addr
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// cleanEnv is the test's environment without QUOTAGATE_* variables, which
// would override the generated config.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "QUOTAGATE_") && !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	return env
}

// pollHealthy reports whether /healthz answered 200 within timeout.
func (g *gateway) pollHealthy(timeout time.Duration) bool { return g.poll("/healthz", timeout) }

// waitReady polls /readyz until it answers 200 or timeout passes.
func (g *gateway) waitReady(timeout time.Duration) {
	g.t.Helper()
	if !g.pollReady(timeout) {
		g.t.Fatalf("%s: /readyz not 200 within %v (exited: %v)", g.name, timeout, g.exited())
	}
}

// pollReady reports whether /readyz answered 200 within timeout.
func (g *gateway) pollReady(timeout time.Duration) bool { return g.poll("/readyz", timeout) }

// poll reports whether the admin path answered 200 within timeout. It polls
// every 10 ms; one poll is bounded by 2 s.
func (g *gateway) poll(path string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	c := &http.Client{Timeout: 2 * time.Second}
	for {
		if g.exited() {
			return false
		}
		if resp, err := c.Get(g.Admin + path); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond) // polling an external process
	}
}

func (g *gateway) exited() bool {
	select {
	case <-g.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits for the exit, killing the process if it has
// not exited within its shutdown timeout plus 2 s. It returns the exit
// status. Stopping twice is harmless.
func (g *gateway) stop() error {
	if g.cmd == nil || g.cmd.Process == nil {
		return nil
	}
	if !g.exited() {
		_ = g.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-g.done:
		case <-time.After(5 * time.Second):
			_ = g.cmd.Process.Kill()
			<-g.done
		}
	}
	return g.exit
}

// reload rewrites the gateway's config file with cfg (on the gateway's own
// listen addresses) and sends SIGHUP.
func (g *gateway) reload(cfg *gwConfig) {
	g.t.Helper()
	g.writeConfig(cfg)
	g.hup()
}

// configJSON returns cfg as the gateway's config file would hold it.
func (g *gateway) configJSON(cfg *gwConfig) string {
	g.t.Helper()
	own := cfg.clone(g.t)
	own.Server.Listen, own.Server.AdminListen = g.listen, g.adminListen
	b, err := json.MarshalIndent(own, "", "  ")
	if err != nil {
		g.t.Fatal(err)
	}
	return string(b)
}

// writeConfig rewrites the config file with cfg on the gateway's listen
// addresses, without signalling.
func (g *gateway) writeConfig(cfg *gwConfig) {
	g.t.Helper()
	own := cfg.clone(g.t)
	own.Server.Listen, own.Server.AdminListen = g.listen, g.adminListen
	own.write(g.t, g.cfgPath)
}

// hup sends SIGHUP.
func (g *gateway) hup() {
	g.t.Helper()
	if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		g.t.Fatalf("%s: SIGHUP: %v", g.name, err)
	}
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

// rssKB reads VmRSS of the process from /proc, in kB.
func (g *gateway) rssKB() int64 {
	g.t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", g.cmd.Process.Pid))
	if err != nil {
		g.t.Skipf("reading RSS: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err == nil {
				return kb
			}
		}
	}
	g.t.Fatalf("%s: no VmRSS in /proc status", g.name)
	return 0
}

// logBuffer collects a process's output; safe for concurrent use.
type logBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

func newLogBuffer() *logBuffer { return &logBuffer{changed: make(chan struct{})} }

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	close(l.changed)
	l.changed = make(chan struct{})
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// tail returns the last n lines.
func (l *logBuffer) tail(n int) string {
	lines := strings.Split(strings.TrimRight(l.String(), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[... %d earlier lines]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// digest returns up to n lines of the log that are not access-log lines
// ("msg":"request"), the last ones when there are more.
func (l *logBuffer) digest(n int) string {
	var keep []string
	skipped := 0
	for _, line := range strings.Split(strings.TrimRight(l.String(), "\n"), "\n") {
		if strings.Contains(line, `"msg":"request"`) {
			skipped++
			continue
		}
		keep = append(keep, line)
	}
	if len(keep) > n {
		keep = append([]string{fmt.Sprintf("[... %d earlier lines]", len(keep)-n)}, keep[len(keep)-n:]...)
	}
	return strings.Join(keep, "\n") + fmt.Sprintf("\n[%d access-log lines left out]", skipped)
}

// count returns how many log lines contain s.
func (l *logBuffer) count(s string) int {
	return strings.Count(l.String(), s)
}
