package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is the bench's own redis-server, shared by the contenders
// that use Redis.
type redisServer struct {
	addr    string
	busPort int // cluster bus port; 0 for a standalone server
	proc    *proc
	client  *redis.Client // for INFO and FLUSHALL between runs
}

// startRedis starts redis-server from PATH on a free port with nothing
// persisted, files in dir; with cluster set, cluster-enabled on a free bus
// port and not yet part of any cluster (see startCluster).
func startRedis(ctx context.Context, ps *procs, dir string, cluster bool) (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redis-server is not on PATH; install Redis 7 (apt-get install redis-server) or leave the Redis contenders (evalsha, quotagate-redis) out of -contenders")
	}
	var lastErr error
	for range 3 { // the free port may be taken before redis-server binds it
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		args := []string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--protected-mode", "no",
			"--dir", dir, "--save", "", "--appendonly", "no",
			"--logfile", filepath.Join(dir, "redis.log")}
		busPort := 0
		if cluster {
			if busPort, err = freePort(); err != nil {
				return nil, err
			}
			args = append(args, "--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(busPort),
				"--cluster-config-file", filepath.Join(dir, "nodes.conf"))
		}
		cmd := exec.Command(bin, args...)
		p, err := ps.start("redis-server", cmd, syscall.SIGKILL, nil)
		if err != nil {
			return nil, err
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		client := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second})
		lastErr = p.waitFor(ctx, 10*time.Second, "PING reply", func() error {
			return client.Ping(ctx).Err()
		})
		if lastErr == nil {
			return &redisServer{addr: addr, busPort: busPort, proc: p, client: client}, nil
		}
		_ = client.Close()
		p.stop(time.Second)
	}
	return nil, fmt.Errorf("starting redis-server: %w", lastErr)
}

// version returns redis_version from INFO server, or "" on error.
func (r *redisServer) version(ctx context.Context) string {
	s, err := r.client.Info(ctx, "server").Result()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return ""
}

// cmdCounts is the calls per command from INFO commandstats.
type cmdCounts map[string]uint64

// commandStats reads INFO commandstats.
func (r *redisServer) commandStats(ctx context.Context) (cmdCounts, error) {
	s, err := r.client.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	return parseCommandStats(s)
}

// parseCommandStats parses the lines "cmdstat_<name>:calls=N,usec=..." of
// INFO commandstats; other lines are ignored.
func parseCommandStats(s string) (cmdCounts, error) {
	out := cmdCounts{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok {
			return nil, fmt.Errorf("commandstats: malformed line %q", line)
		}
		found := false
		for _, f := range strings.Split(fields, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("commandstats: %s: calls: %w", name, err)
				}
				out[name] = n
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("commandstats: no calls in %q", line)
		}
	}
	return out, nil
}

// readsProcessed reads total_reads_processed from INFO stats: the socket
// reads redis-server has made (one read can carry many pipelined
// commands, so reads per request below 1 mean requests shared reads).
func (r *redisServer) readsProcessed(ctx context.Context) (uint64, error) {
	s, err := r.client.Info(ctx, "stats").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO stats: %w", err)
	}
	return parseReadsProcessed(s)
}

// parseReadsProcessed finds the line "total_reads_processed:N" of INFO
// stats.
func parseReadsProcessed(s string) (uint64, error) {
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_reads_processed:"); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO stats: total_reads_processed: %w", err)
			}
			return n, nil
		}
	}
	return 0, errors.New("INFO stats: no total_reads_processed (redis-server older than 6.2?)")
}

// benchOverhead names commands the bench itself sends; they are left out of
// the per-request counts.
var benchOverhead = map[string]bool{"info": true, "ping": true, "flushall": true, "hello": true, "client|setinfo": true}

// isScript reports whether a command runs a script or function.
func isScript(name string) bool {
	switch name {
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
		return true
	}
	return false
}

// delta returns the calls made between before and after: all commands
// (including those called from scripts, which commandstats counts too) and
// top-level script calls.
func (after cmdCounts) delta(before cmdCounts) (all, scripts uint64) {
	for name, n := range after {
		if benchOverhead[name] {
			continue
		}
		d := n - before[name]
		if n < before[name] {
			d = n // counters were reset
		}
		all += d
		if isScript(name) {
			scripts += d
		}
	}
	return all, scripts
}
