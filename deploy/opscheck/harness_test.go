package opscheck

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// repoRoot is the root of the quotagate repository (two levels up).
var repoRoot = func() string {
	abs, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		panic(err) // only when the working directory is gone
	}
	return abs
}()

// repoPath returns the path of a file given relative to the repository root.
func repoPath(rel string) string { return filepath.Join(repoRoot, filepath.FromSlash(rel)) }

var (
	buildOnce sync.Once
	buildDir  string
	builtBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// gatewayBinary builds ./cmd/quotagate of the repository once per test run
// and returns its path.
func gatewayBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "quotagate-opscheck-")
		if buildErr != nil {
			return
		}
		builtBin = filepath.Join(buildDir, "quotagate")
		cmd := exec.Command("go", "build", "-o", builtBin, "./cmd/quotagate")
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/quotagate: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// gateway is a quotagate process started by a test.
type gateway struct {
	cmd    *exec.Cmd
	listen string // host:port of the gateway listener
	admin  string // host:port of the admin listener
	logs   *lockedBuffer
	exited chan struct{}
}

// lockedBuffer is a bytes.Buffer safe for one writer and many readers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startGateway runs the gateway binary with args and env (added to a
// minimal environment). env should set QUOTAGATE_SERVER_LISTEN and
// QUOTAGATE_SERVER_ADMIN_LISTEN to port 0 addresses: the addresses actually
// bound are read from the start-up log line. It waits until /readyz
// answers 200 and stops the process when t ends.
func startGateway(t *testing.T, args, env []string) *gateway {
	t.Helper()
	cmd := exec.Command(gatewayBinary(t), args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{cmd: cmd, logs: &lockedBuffer{}, exited: make(chan struct{})}
	cmd.Stdout = g.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	started := make(chan [2]string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			g.logs.Write(append(line, '\n'))
			var rec struct {
				Msg         string `json:"msg"`
				Listen      string `json:"listen"`
				AdminListen string `json:"admin_listen"`
			}
			if json.Unmarshal(line, &rec) == nil && rec.Msg == "quotagate started" {
				started <- [2]string{rec.Listen, rec.AdminListen}
			}
		}
		_, _ = io.Copy(g.logs, stderr)
		_ = cmd.Wait()
		close(g.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-g.exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-g.exited
		}
	})
	select {
	case addrs := <-started:
		g.listen, g.admin = addrs[0], addrs[1]
	case <-g.exited:
		t.Fatalf("the gateway exited before it started; logs:\n%s", g.logs)
	case <-time.After(60 * time.Second):
		t.Fatalf("missed deadline: no start-up log line within 60s; logs:\n%s", g.logs)
	}
	g.waitFor(t, 60*time.Second, "/readyz to answer 200", func() (bool, error) {
		code, _, err := g.get("/readyz")
		return code == http.StatusOK, err
	})
	return g
}

// get fetches path from the admin listener.
func (g *gateway) get(path string) (int, string, error) {
	return httpGet("http://" + g.admin + path)
}

// httpGet fetches url and returns the status code and body.
func httpGet(url string) (int, string, error) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// waitFor polls cond every 50ms until it is true; after timeout the test
// fails with a missed deadline (told apart from a wrong answer by its
// message) and the last error cond returned.
func (g *gateway) waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if ok {
			return
		}
		select {
		case <-g.exited:
			t.Fatalf("the gateway exited while waiting for %s; logs:\n%s", what, g.logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("missed deadline: waited %v for %s (last error: %v); logs:\n%s", timeout, what, err, g.logs)
		}
		time.Sleep(50 * time.Millisecond) // polling another process
	}
}

// series is one sample line of a Prometheus text exposition.
type series struct {
	name   string
	labels map[string]string
	value  float64
}

// scrape fetches /metrics from the admin listener and parses it.
func (g *gateway) scrape(t *testing.T) []series {
	t.Helper()
	code, body, err := g.get("/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", code, err)
	}
	out, err := parseExposition(body)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// metricValue is the sum of the samples of name whose labels include want.
func metricValue(ss []series, name string, want map[string]string) float64 {
	var sum float64
	for _, s := range ss {
		if s.name != name {
			continue
		}
		match := true
		for k, v := range want {
			if s.labels[k] != v {
				match = false
			}
		}
		if match {
			sum += s.value
		}
	}
	return sum
}

// parseExposition reads the sample lines of the Prometheus text format:
// `name{label="value",...} value [timestamp]`.
func parseExposition(text string) ([]series, error) {
	var out []series
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s := series{labels: map[string]string{}}
		rest := line
		if i := strings.IndexAny(line, "{ "); i >= 0 && line[i] == '{' {
			s.name = line[:i]
			var err error
			rest, err = parseLabels(line[i+1:], s.labels)
			if err != nil {
				return nil, fmt.Errorf("/metrics line %d %q: %v", n+1, line, err)
			}
		} else if i >= 0 {
			s.name, rest = line[:i], line[i:]
		}
		f := strings.Fields(rest)
		if s.name == "" || len(f) == 0 {
			return nil, fmt.Errorf("/metrics line %d %q: no name or value", n+1, line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("/metrics line %d %q: value: %v", n+1, line, err)
		}
		s.value = v
		out = append(out, s)
	}
	return out, nil
}

// parseLabels reads `k="v",...}` into into and returns what follows the
// closing brace.
func parseLabels(s string, into map[string]string) (string, error) {
	for {
		s = strings.TrimLeft(s, " ,")
		if strings.HasPrefix(s, "}") {
			return s[1:], nil
		}
		eq := strings.Index(s, "=")
		if eq < 0 || len(s) < eq+2 || s[eq+1] != '"' {
			return "", fmt.Errorf("malformed label in %q", s)
		}
		key := s[:eq]
		var val strings.Builder
		i := eq + 2
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(s[i])
				}
				continue
			}
			val.WriteByte(s[i])
		}
		if i >= len(s) {
			return "", fmt.Errorf("unterminated label value in %q", s)
		}
		into[key] = val.String()
		s = s[i+1:]
	}
}

// redisServer is a redis-server process started by a test.
type redisServer struct {
	addr string
	cmd  *exec.Cmd
}

// startRedis starts redis-server (no persistence) on a free loopback port,
// retrying with another port if the one chosen was taken meanwhile, and
// stops it when t ends. Without redis-server the test is skipped, or fails
// when CI=true.
func startRedis(t *testing.T) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server is not installed and CI=true")
		}
		t.Skip("redis-server not installed")
	}
	var lastErr error
	for range 5 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		r := &redisServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
		r.cmd = exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", t.TempDir())
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = r.cmd.Wait(); close(done) }()
		if lastErr = waitPong(r.addr, done, 20*time.Second); lastErr == nil {
			t.Cleanup(func() {
				_ = r.cmd.Process.Signal(syscall.SIGCONT)
				_ = r.cmd.Process.Kill()
				<-done
			})
			return r
		}
		_ = r.cmd.Process.Kill()
		<-done
	}
	t.Fatalf("starting redis-server: %v", lastErr)
	return nil
}

// waitPong waits until the server at addr answers PING.
func waitPong(addr string, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ping(addr)
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("missed deadline: no PONG within %v: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond) // polling another process
	}
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}
