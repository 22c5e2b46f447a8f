package redistest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// StartSentinel starts a Redis Sentinel (redis-server --sentinel) that
// monitors primary under masterName with a quorum of 1, waits until it
// reports the primary's address, and stops it when tb ends. The returned
// Server's Addr is the sentinel's address, which clients configured for
// Sentinel take as their seed.
func StartSentinel(tb testing.TB, primary *Server, masterName string) *Server {
	tb.Helper()
	return StartSentinelWith(tb, primary.Addr, masterName, SentinelOptions{})
}

// SentinelOptions are a Sentinel's settings for the primary it monitors.
type SentinelOptions struct {
	// Quorum is how many Sentinels must agree that the primary is down
	// before one fails it over; 0 means 1.
	Quorum int
	// DownAfter is how long the primary (or a replica) may not answer
	// before this Sentinel holds it down; 0 means 1s.
	DownAfter time.Duration
	// FailoverTimeout is Sentinel's failover-timeout: among other things,
	// a Sentinel starts no failover of the primary within twice it of
	// the last one it started or voted for; 0 means Sentinel's default
	// (3 minutes).
	FailoverTimeout time.Duration
}

// StartSentinelWith starts a Sentinel that monitors the primary at addr
// (host:port, which may be a relay in front of it: Sentinel reports the
// address it monitors) under masterName as o says, waits until it reports
// that address, and stops it when tb ends.
func StartSentinelWith(tb testing.TB, addr, masterName string, o SentinelOptions) *Server {
	tb.Helper()
	bin := RedisServerPath(tb)
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		tb.Fatalf("redistest: primary address %q: %v", addr, err)
	}
	quorum, downAfter := max(o.Quorum, 1), o.DownAfter
	if downAfter <= 0 {
		downAfter = time.Second
	}
	dir := tb.TempDir()
	var s *Server
	for range 5 {
		ports, err := freePorts(1)
		if err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		// Sentinel rewrites its config file, so it must be a file of its own.
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\nlogfile %s\n"+
			"sentinel monitor %s %s %s %d\nsentinel down-after-milliseconds %s %d\n",
			ports[0], dir, filepath.Join(dir, "redis.log"), masterName, host, port, quorum, masterName, downAfter.Milliseconds())
		if o.FailoverTimeout > 0 {
			text += fmt.Sprintf("sentinel failover-timeout %s %d\n", masterName, o.FailoverTimeout.Milliseconds())
		}
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		s = &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), dir: dir, port: ports[0], args: []string{conf, "--sentinel"}}
		if err = s.launch(bin); err == nil {
			break
		}
		s = nil
	}
	if s == nil {
		tb.Fatal("redistest: sentinel did not start")
	}
	s.tb = tb
	tb.Cleanup(s.stop)
	deadline := time.Now().Add(StartTimeout)
	for {
		r, err := s.Do("SENTINEL", "get-master-addr-by-name", masterName)
		if addr, ok := r.([]any); err == nil && ok && len(addr) == 2 && fmt.Sprint(addr[1]) == port {
			return s
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: sentinel never reported master %s: %v %v", masterName, r, err)
		}
		time.Sleep(20 * time.Millisecond) // polling the sentinel's view
	}
}
