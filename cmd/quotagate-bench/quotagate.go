package main

import (
	"bufio"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// quotagatePkg is the import path go build compiles when -quotagate is not
// given.
const quotagatePkg = "github.com/quotagate/quotagate/cmd/quotagate"

// buildQuotagate compiles quotagate into dir and returns the binary's path.
// It must run inside the module (go run ./cmd/quotagate-bench from the
// repository does).
func buildQuotagate(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "quotagate")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, quotagatePkg)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s (run inside the quotagate module, or pass -quotagate): %v\n%s", quotagatePkg, err, out)
	}
	return bin, nil
}

// qgStore is the store a quotagate contender runs with.
type qgStore int

const (
	qgMemory     qgStore = iota // store.kind memory
	qgRedis                     // store.kind redis, one script call per decision
	qgRedisLease                // store.kind redis, the policy leases blocks
)

// qgLease is the tenant policy's lease in the leased variant: lease: auto,
// the setting that fits every tenant of a policy (docs/concepts/leases.md#lease-auto), so that the hot
// key of the "one" mix is served from blocks sized by its demand while the
// keys of the "uniform" mix, none of them hot, go to Redis unleased.
const qgLease = "    lease: auto\n"

// quotagateConfig returns a config that admits rate requests per second
// per key (burst the same) in one "tenant" policy, with each of the
// numKeys keys its own tenant, stage 1 far above that, listeners on free
// ports, and the store given (redisAddr is used unless store is
// qgMemory; lease adds qgLease to the policy).
func quotagateConfig(upstream string, rate int, redisAddr string, timeout time.Duration, lease, pprof bool) string {
	var b strings.Builder
	b.WriteString("# Written by quotagate-bench.\n")
	fmt.Fprintf(&b, "server: {listen: 127.0.0.1:0, admin_listen: 127.0.0.1:0, pprof: %t}\n", pprof)
	if redisAddr == "" {
		b.WriteString("store: {kind: memory}\n")
	} else {
		fmt.Fprintf(&b, "store: {kind: redis, redis: {addrs: [%q], timeout: %s, pool_size: 64}}\n", redisAddr, timeout)
	}
	b.WriteString("log: {level: info}\n")
	b.WriteString("identity:\n  api_keys:\n")
	for i := range numKeys {
		fmt.Fprintf(&b, "    - {key_sha256: %s, tenant: t%d, tier: bench}\n", keyHash(benchKey(i)), i)
	}
	local := 100 * rate
	fmt.Fprintf(&b, "tiers:\n  bench: {local: {rate: %d, per: 1s, burst: %d}}\n", local, local)
	b.WriteString("policies:\n  tenant:\n    scope: tenant\n    algorithm: token_bucket\n    on_store_error: open\n")
	if lease {
		b.WriteString(qgLease)
	}
	fmt.Fprintf(&b, "    limits:\n      bench: {rate: %d, per: 1s, burst: %d}\n", rate, rate)
	fmt.Fprintf(&b, "upstreams:\n  up: {url: %q, timeout: 10s}\n", upstream)
	b.WriteString("routes:\n  - {name: items.get, method: GET, path: \"/{rest...}\", upstream: up, policies: [tenant]}\n")
	return b.String()
}

// startedLine is the log record quotagate writes once it listens.
type startedLine struct {
	Msg         string `json:"msg"`
	Listen      string `json:"listen"`
	AdminListen string `json:"admin_listen"`
}

// startQuotagate writes a config and starts quotagate on it (the baseline
// binary for an X@base contender, with the same config), learning its
// ports from its "quotagate started" log line.
func startQuotagate(ctx context.Context, e *env, c *contender, store qgStore) error {
	redisAddr := ""
	if store != qgMemory {
		redisAddr = e.redis.addr
	}
	path := filepath.Join(e.dir, c.name+".yaml")
	cfg := quotagateConfig(e.upstream, e.rate, redisAddr, e.timeout, store == qgRedisLease, e.profileDir != "")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return err
	}
	started := make(chan startedLine, 1)
	bin := e.qgBin
	if onBaseline(c.name) {
		bin = e.qgBase
	}
	cmd := exec.Command(bin, "-config", path, "-watch-interval", "0")
	p, err := e.ps.start(c.name, cmd, syscall.SIGKILL, func(line string) {
		var s startedLine
		if json.Unmarshal([]byte(line), &s) == nil && s.Msg == "quotagate started" {
			select {
			case started <- s:
			default:
			}
		}
	})
	if err != nil {
		return err
	}
	c.proc = p
	select {
	case s := <-started:
		c.base, c.admin = "http://"+s.Listen, s.AdminListen
		return nil
	case <-p.done:
		return fmt.Errorf("%s exited before listening:\n%s", c.name, p.output())
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s did not start within 30s:\n%s", c.name, p.output())
	case <-ctx.Done():
		return ctx.Err()
	}
}

// storeFallbacks sums quotagate_store_fallback_total (decisions made by
// on_store_error because the store failed or timed out) from quotagate's
// Prometheus endpoint.
func storeFallbacks(ctx context.Context, admin string) (uint64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return sumCounter(bufio.NewScanner(resp.Body), "quotagate_store_fallback_total")
}

// sumCounter adds up every sample of the Prometheus text-format counter
// name.
func sumCounter(sc *bufio.Scanner, name string) (uint64, error) {
	var sum float64
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("metric %s: %w", name, err)
		}
		sum += v
	}
	return uint64(sum), sc.Err()
}

// cpuProfile fetches a CPU profile of seconds from quotagate's admin
// listener into path.
func cpuProfile(ctx context.Context, admin string, seconds int, path string) error {
	url := "http://" + admin + "/debug/pprof/profile?seconds=" + strconv.Itoa(seconds)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// binVersion names a quotagate binary for the report: its path and the
// commit it was built from (with "+dirty" for a modified work tree), as
// its build information records them.
func binVersion(bin string) string {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return bin
	}
	rev, dirty := "", ""
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision" && len(s.Value) >= 12:
			rev = s.Value[:12]
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "+dirty"
		}
	}
	if rev == "" {
		return bin
	}
	return bin + " (" + rev + dirty + ")"
}
