// Package redistest starts real redis-server processes for tests: a
// standalone server (StartStandalone, or one shared per test binary with
// Shared) and a real Redis Cluster (StartCluster).
//
// Servers listen on 127.0.0.1 on free ports, keep their files in a temporary
// directory, persist nothing (a restarted server is empty) and are stopped
// when the test that started them ends. redis-server is looked up on PATH;
// when it is missing a test is skipped, or fails when the environment
// variable CI is "true", so that a CI run cannot pass without Redis.
package redistest

import (
	"bytes"
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// StartTimeout bounds how long a server may take to answer PING after it
// was started.
const StartTimeout = 10 * time.Second

// Server is one redis-server process. Its methods fail the test that
// started it when the process cannot be controlled.
type Server struct {
	// Addr is "127.0.0.1:port"; it stays the same across Restart.
	Addr string

	tb      testing.TB
	dir     string
	port    int
	busPort int // cluster bus port; 0 for a standalone server
	args    []string
	shared  bool
	// password and tls are how the harness itself reaches a server
	// started with Options (AUTH after connecting; TLS instead of TCP).
	password string
	tls      *tls.Config
	// wrap and startTimeout are Options.Wrap and Options.StartTimeout
	// (0: the package's StartTimeout).
	wrap         []string
	startTimeout time.Duration

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// RedisServerPath returns the path of redis-server, skipping tb when it is
// not on PATH (failing it instead when CI=true).
func RedisServerPath(tb testing.TB) string {
	tb.Helper()
	p, err := exec.LookPath("redis-server")
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		tb.Fatalf("redistest: redis-server is not on PATH, and CI=true requires the Redis tests to run: %v", err)
	}
	tb.Skipf("redistest: redis-server is not on PATH; install Redis 7 to run this test (%v)", err)
	return ""
}

// StartStandalone starts an empty standalone server and stops it when tb
// ends.
func StartStandalone(tb testing.TB) *Server {
	tb.Helper()
	return StartStandaloneWith(tb, Options{})
}

// Options are what StartStandaloneWith sets up beyond a plain server.
type Options struct {
	// Password, when set, is required from every client (requirepass);
	// the harness's own Do and PING authenticate with it.
	Password string
	// TLS, when set, makes the server listen with TLS only (plain TCP is
	// off), present TLS.ServerCert and ask clients for a certificate
	// signed by TLS.CA (tls-auth-clients yes). Addr is the TLS address.
	TLS *TLSFiles
	// Args are more redis-server arguments, appended to the harness's
	// own (a later argument overrides an earlier one), such as
	// "--rename-command", "FCALL", "" for a server without FCALL.
	Args []string
	// Wrap, when set, is a command that runs the server: redis-server's
	// path and arguments are appended to it, as in valgrind
	// --tool=callgrind. It must run redis-server in its own process
	// (valgrind does; a shell script must exec it). A start that fails
	// (its port taken meanwhile) is retried on other ports, as always.
	Wrap []string
	// StartTimeout bounds how long each start may take until the server
	// answers PING; 0 means the package's StartTimeout. A server under
	// valgrind needs a minute or more on a busy machine.
	StartTimeout time.Duration
}

// StartStandaloneWith starts an empty standalone server set up as o says
// and stops it when tb ends.
func StartStandaloneWith(tb testing.TB, o Options) *Server {
	tb.Helper()
	bin := RedisServerPath(tb)
	s, err := newServerWith(bin, tb.TempDir(), false, o)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	s.tb = tb
	tb.Cleanup(s.stop)
	return s
}

// newServer starts a server in dir on a free port (a free cluster bus port
// too when cluster is set), retrying with other ports if one was taken
// between choosing and binding it.
func newServer(bin, dir string, cluster bool) (*Server, error) {
	return newServerWith(bin, dir, cluster, Options{})
}

// newServerWith is newServer for a server set up as o says.
func newServerWith(bin, dir string, cluster bool, o Options) (*Server, error) {
	var lastErr error
	for range 5 {
		n := 1
		if cluster {
			n = 2
		}
		ports, err := freePorts(n)
		if err != nil {
			return nil, err
		}
		s := &Server{
			Addr:         net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
			dir:          dir,
			port:         ports[0],
			wrap:         o.Wrap,
			startTimeout: o.StartTimeout,
		}
		s.args = []string{
			"--port", strconv.Itoa(s.port),
			"--bind", "127.0.0.1",
			"--protected-mode", "no",
			"--dir", dir,
			"--save", "",
			"--appendonly", "no",
			"--logfile", filepath.Join(dir, "redis.log"),
		}
		if o.Password != "" {
			s.password = o.Password
			s.args = append(s.args, "--requirepass", o.Password)
		}
		if o.TLS != nil {
			s.tls = o.TLS.ClientConfig()
			s.args[1] = "0" // no plain TCP listener
			s.args = append(s.args,
				"--tls-port", strconv.Itoa(s.port),
				"--tls-cert-file", o.TLS.ServerCert,
				"--tls-key-file", o.TLS.ServerKey,
				"--tls-ca-cert-file", o.TLS.CA,
				"--tls-auth-clients", "yes",
			)
		}
		if cluster {
			s.busPort = ports[1]
			s.args = append(s.args,
				"--cluster-enabled", "yes",
				"--cluster-port", strconv.Itoa(s.busPort),
				"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
				"--cluster-node-timeout", "2000",
				"--cluster-require-full-coverage", "yes",
			)
		}
		s.args = append(s.args, o.Args...)
		if lastErr = s.launch(bin); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

// freePorts returns n distinct ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// launch starts the process and waits until it answers PING, as itself:
// a server that another process started on the same port in the meantime
// is not taken for it.
func (s *Server) launch(bin string) error {
	// The log file is appended to across restarts; start each run clean.
	logPath := filepath.Join(s.dir, "redis.log")
	_ = os.Remove(logPath)
	_ = os.Remove(filepath.Join(s.dir, "nodes.conf"))
	cmd := exec.Command(bin, s.args...)
	if len(s.wrap) > 0 {
		cmd = exec.Command(s.wrap[0], slices.Concat(s.wrap[1:], []string{bin}, s.args)...)
	}
	cmd.SysProcAttr = procAttr()
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	err := waitPing(s.ping, done, cmp.Or(s.startTimeout, StartTimeout))
	if err == nil {
		err = s.checkPID(cmd.Process.Pid)
	}
	if err != nil {
		_ = cmd.Process.Kill()
		<-done
		log, _ := os.ReadFile(logPath)
		return fmt.Errorf("redis-server on %s did not start: %w\n%s%s", s.Addr, err, stderr.Bytes(), log)
	}
	return nil
}

// waitPing calls ping until it succeeds, the process exits (done is
// closed) or timeout passes. It backs off from 1 ms to 20 ms.
func waitPing(ping func() error, done <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	wait := time.Millisecond
	var last error
	for {
		select {
		case <-done:
			return errors.New("the process exited")
		default:
		}
		if last = ping(); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no PONG within %v: %w", timeout, last)
		}
		t := time.NewTimer(wait)
		select {
		case <-done:
			t.Stop()
			return errors.New("the process exited")
		case <-t.C:
		}
		wait = min(2*wait, 20*time.Millisecond)
	}
}

// ping sends PING to the server and expects PONG.
func (s *Server) ping() error {
	c, err := s.dial(200 * time.Millisecond)
	if err != nil {
		return err
	}
	defer c.close()
	r, err := c.do(200*time.Millisecond, "PING")
	if err != nil {
		return err
	}
	if r != "PONG" {
		return fmt.Errorf("PING answered %v", r)
	}
	return nil
}

// checkPID fails unless the server that answers on s.Addr runs as
// process pid.
func (s *Server) checkPID(pid int) error {
	info, err := s.Do("INFO", "server")
	if err != nil {
		return err
	}
	str, _ := info.(string)
	for _, line := range strings.Split(str, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			if v != strconv.Itoa(pid) {
				return fmt.Errorf("the server on %s is process %s, not the one started (%d)", s.Addr, v, pid)
			}
			return nil
		}
	}
	return fmt.Errorf("INFO server of %s has no process_id", s.Addr)
}

// Shutdown stops the server as SHUTDOWN NOSAVE does, so that it exits
// cleanly (and a Wrap such as valgrind writes its output), and waits up
// to timeout for the process to exit; past that it kills it and fails tb.
// It panics on the shared server.
func (s *Server) Shutdown(tb testing.TB, timeout time.Duration) {
	if s.shared {
		panic("redistest: Shutdown on the shared server; start a private one with StartStandalone")
	}
	tb.Helper()
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	_, _ = s.Do("SHUTDOWN", "NOSAVE") // the connection drops
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.kill()
		tb.Fatalf("redistest: %s did not exit within %v of SHUTDOWN", s.Addr, timeout)
	}
}

// Do sends one command to the server on a fresh connection and returns the
// reply: string, int64, nil, []any, or an error (*ReplyError for an error
// reply). It never fails the test, so it can probe a paused or dead server.
func (s *Server) Do(args ...string) (any, error) {
	c, err := s.dial(time.Second)
	if err != nil {
		return nil, err
	}
	defer c.close()
	return c.do(5*time.Second, args...)
}

// MustDo is Do that fails the test on any error.
func (s *Server) MustDo(tb testing.TB, args ...string) any {
	tb.Helper()
	r, err := s.Do(args...)
	if err != nil {
		tb.Fatalf("redistest: %s %v: %v", s.Addr, args, err)
	}
	return r
}

func (s *Server) signal(sig os.Signal, what string) {
	if s.shared {
		panic("redistest: " + what + " on the shared server; start a private one with StartStandalone")
	}
	s.tb.Helper()
	if sig == nil {
		s.tb.Fatalf("redistest: %s is not supported on this system", what)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.tb.Fatalf("redistest: %s %s: %v", what, s.Addr, err)
	}
}

// Pause freezes the process (SIGSTOP): connections stay open and commands
// hang, as with an overloaded or partitioned server.
func (s *Server) Pause() { s.signal(sigStop, "Pause") }

// Resume continues a paused process (SIGCONT).
func (s *Server) Resume() { s.signal(sigCont, "Resume") }

// Kill stops the process with SIGKILL and waits for it to exit. Its data is
// lost. Killing a server that is not running does nothing.
func (s *Server) Kill() {
	if s.shared {
		panic("redistest: Kill on the shared server; start a private one with StartStandalone")
	}
	s.kill()
}

func (s *Server) kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Restart kills the process if it runs and starts an empty one on the same
// address. A cluster node restarts as a fresh node that owns no slots.
func (s *Server) Restart() {
	if s.shared {
		panic("redistest: Restart on the shared server; start a private one with StartStandalone")
	}
	s.tb.Helper()
	s.kill()
	bin := RedisServerPath(s.tb)
	var err error
	// The port was ours a moment ago; another process could take it in
	// between, so retry briefly.
	for range 20 {
		if err = s.launch(bin); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.tb.Fatalf("redistest: restart %s: %v", s.Addr, err)
}

// stop kills the process; it is registered with Cleanup.
func (s *Server) stop() { s.kill() }

// Port is the server's client port; BusPort its Cluster bus port (0 for a
// standalone server). Both stay the same across Restart.
func (s *Server) Port() int { return s.port }

// BusPort is the server's Cluster bus port; see Port.
func (s *Server) BusPort() int { return s.busPort }
