package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// traefikVersion is the Traefik release the bench's configuration is
// written for (its RateLimit middleware with a Redis backend appeared in
// v3.4; the peer build script makes v3.7.13).
const traefikVersion = "v3.7"

// traefikStaticConfig is Traefik's static configuration: one entry point
// on 127.0.0.1:port with a 1 s shutdown grace, the file provider reading
// dynamicPath once (no watching), error-level logs, and no API, dashboard,
// access log, metrics or tracing, so that the row measures proxying and
// limiting alone.
func traefikStaticConfig(port int, dynamicPath string) string {
	return fmt.Sprintf(`# Written by quotagate-bench for Traefik %s.
global:
  checkNewVersion: false
  sendAnonymousUsage: false
entryPoints:
  web:
    address: "127.0.0.1:%d"
    transport:
      lifeCycle:
        graceTimeOut: 1s
providers:
  file:
    filename: %q
    watch: false
log:
  level: ERROR
  noColor: true
`, traefikVersion, port, dynamicPath)
}

// traefikDynamicConfig is Traefik's dynamic configuration: every path to
// upstream through a RateLimit middleware of rate requests per second
// (period 1s, burst rate, as every other limiter in the bench), keyed by
// the Authorization header and kept in Redis at redisAddr.
func traefikDynamicConfig(upstream, redisAddr string, rate int) string {
	return fmt.Sprintf(`# Written by quotagate-bench for Traefik %s.
http:
  routers:
    all:
      entryPoints: [web]
      rule: "PathPrefix(%s)"
      service: upstream
      middlewares: [rl]
  middlewares:
    rl:
      rateLimit:
        average: %d
        period: 1s
        burst: %d
        sourceCriterion:
          requestHeaderName: Authorization
        redis:
          endpoints: [%q]
  services:
    upstream:
      loadBalancer:
        passHostHeader: true
        servers:
          - url: %q
`, traefikVersion, "`/`", rate, rate, redisAddr, upstream)
}

// traefikArgs are the command-line arguments that start Traefik on the
// static configuration at staticPath.
func traefikArgs(staticPath string) []string {
	return []string{"--configFile=" + staticPath}
}

// traefikBinVersion returns what "BIN version" prints on its Version line,
// or "" when it prints none.
func traefikBinVersion(bin string) string {
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Version:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// startTraefik writes Traefik's two configuration files into their own
// directory and starts e.traefikBin on them; it gets SIGTERM if this
// process dies.
func startTraefik(e *env, c *contender) error {
	dir := filepath.Join(e.dir, "traefik")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	static, dynamic := filepath.Join(dir, "traefik.yml"), filepath.Join(dir, "dynamic.yml")
	if err := os.WriteFile(dynamic, []byte(traefikDynamicConfig(e.upstream, e.redis.addr, e.rate)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(static, []byte(traefikStaticConfig(port, dynamic)), 0o644); err != nil {
		return err
	}
	p, err := e.ps.start(c.name, exec.Command(e.traefikBin, traefikArgs(static)...), syscall.SIGTERM, nil)
	if err != nil {
		return err
	}
	c.proc = p
	c.base = "http://127.0.0.1:" + strconv.Itoa(port)
	return nil
}
