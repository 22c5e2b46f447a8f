package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Contender names, in their default order.
const (
	cBare      = "bare"             // httputil.ReverseProxy alone
	cEvalsha   = "evalsha"          // bare proxy + one EVALSHA token bucket per request
	cQGMemory  = "quotagate-memory" // quotagate, store.kind memory
	cQGRedis   = "quotagate-redis"  // quotagate, store.kind redis
	cQGLease   = "quotagate-lease"  // quotagate, store.kind redis, leases on
	cNginx     = "nginx"            // nginx limit_req
	cTraefik   = "traefik"          // Traefik RateLimit middleware on Redis
	requestURI = "/v1/items/42"
	// cUpstream names the open loop's reference runs: the shared upstream
	// loaded directly, not a contender.
	cUpstream = "upstream"
)

var allContenders = []string{cBare, cEvalsha, cQGMemory, cQGRedis, cQGLease, cNginx, cTraefik}

// contenderInfo says what each contender needs.
var contenderInfo = map[string]struct {
	desc      string
	usesRedis bool
}{
	cBare:     {"httputil.ReverseProxy, no limiting", false},
	cEvalsha:  {"ReverseProxy + go-redis EVALSHA token bucket per request", true},
	cQGMemory: {"quotagate, memory store", false},
	cQGRedis:  {"quotagate, Redis store", true},
	cQGLease:  {"quotagate, Redis store, leased blocks", true},
	cNginx:    {"nginx limit_req (shared-memory zone)", false},
	cTraefik:  {"Traefik RateLimit middleware, Redis backend", true},
}

// contender is a running server under test.
type contender struct {
	name  string
	base  string // http://127.0.0.1:port
	proc  *proc
	admin string // quotagate's admin address; "" for others
	// logFile, when set, is a log the contender writes to instead of its
	// output; its tail is shown when the contender fails to start.
	logFile string
}

// env is what starting contenders needs.
type env struct {
	ps       *procs
	dir      string // temporary directory for configs and logs
	self     string // this binary, re-executed for hidden subcommands
	upstream string // base URL of the shared upstream
	redis    *redisServer
	rate     int // per-key limit, requests per second (also the burst)
	qgBin    string
	// qgBase is the baseline quotagate binary (-quotagate-baseline) that
	// the X@base contenders run; "" without one.
	qgBase   string
	nginxBin string
	// traefikBin is the Traefik binary (-traefik); "" skips its row.
	traefikBin string
	timeout    time.Duration // quotagate store.redis.timeout
	// profileDir, when set, makes quotagate serve /debug/pprof and
	// receives its CPU profiles.
	profileDir string
}

// startSelf runs a hidden subcommand of this binary and returns it with
// the address it announced.
func startSelf(ctx context.Context, e *env, name string, args ...string) (*proc, string, error) {
	addrc := make(chan string, 1)
	cmd := exec.Command(e.self, append([]string{name}, args...)...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	p, err := e.ps.start(name, cmd, syscall.SIGKILL, func(line string) {
		if a, ok := strings.CutPrefix(line, listeningPrefix); ok {
			select {
			case addrc <- a:
			default:
			}
		}
	})
	if err != nil {
		return nil, "", err
	}
	select {
	case a := <-addrc:
		return p, a, nil
	case <-p.done:
		return nil, "", fmt.Errorf("%s exited before listening:\n%s", name, p.output())
	case <-time.After(10 * time.Second):
		return nil, "", fmt.Errorf("%s did not listen within 10s:\n%s", name, p.output())
	case <-ctx.Done():
		return nil, "", ctx.Err()
	}
}

// startContender starts one contender and waits until it answers.
func startContender(ctx context.Context, e *env, name string) (*contender, error) {
	c := &contender{name: name}
	var err error
	switch variant(name) {
	case cBare:
		var addr string
		c.proc, addr, err = startSelf(ctx, e, cmdBareProxy, "-upstream", e.upstream)
		c.base = "http://" + addr
	case cEvalsha:
		var addr string
		c.proc, addr, err = startSelf(ctx, e, cmdEvalshaProxy, "-upstream", e.upstream,
			"-redis", e.redis.addr, "-rate", strconv.Itoa(e.rate), "-burst", strconv.Itoa(e.rate))
		c.base = "http://" + addr
	case cQGMemory:
		err = startQuotagate(ctx, e, c, qgMemory)
	case cQGRedis:
		err = startQuotagate(ctx, e, c, qgRedis)
	case cQGLease:
		err = startQuotagate(ctx, e, c, qgRedisLease)
	case cNginx:
		err = startNginx(e, c)
	case cTraefik:
		err = startTraefik(e, c)
	default:
		err = fmt.Errorf("unknown contender %q (want one of %s)", name, strings.Join(allContenders, ", "))
	}
	if err != nil {
		return nil, err
	}
	// Ready when an authenticated request comes back 200.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.base+requestURI, nil)
	req.Header.Set("Authorization", "Bearer "+benchKey(1))
	client := &http.Client{Timeout: time.Second}
	err = c.proc.waitFor(ctx, 15*time.Second, "200 answer", func() error {
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
	client.CloseIdleConnections()
	if err != nil {
		if c.logFile != "" {
			if b, rerr := os.ReadFile(c.logFile); rerr == nil {
				err = fmt.Errorf("%w\n%s:\n%s", err, c.logFile, tail(string(b), 20))
			}
		}
		return nil, err
	}
	return c, nil
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
