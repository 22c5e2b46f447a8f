package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/internal/redistest"
)

// storeConfig is a gateway on the Redis at %[1]s with one route per
// on_store_error mode; %[2]s is more of the store.redis section.
const storeConfig = `server: {listen: "127.0.0.1:0", admin_listen: "127.0.0.1:0"}
store:
  kind: redis
  redis:
    addrs: [%[1]q]
    timeout: 200ms
    password_env: QG_TEST_REDIS_PASSWORD
%[2]s
identity: {anonymous: {tier: anonymous}}
tiers: {anonymous: {}}
policies:
  lenient: {on_store_error: open,   limits: {"*": {rate: 1, per: 1h, burst: 2}}}
  strict:  {on_store_error: closed, limits: {"*": {rate: 1, per: 1h, burst: 2}}}
upstreams: {echo: {url: "echo:"}}
routes:
  - {name: open.get,   method: GET, path: /open,   upstream: echo, policies: [lenient]}
  - {name: closed.get, method: GET, path: /closed, upstream: echo, policies: [strict]}
`

func get(t *testing.T, p *proctest.Proc, path string) int {
	t.Helper()
	resp, err := http.Get(p.URL() + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitLog waits until the process's log holds s n times.
func waitLog(t *testing.T, p *proctest.Proc, s string, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for p.Logs.Count(s) < n {
		select {
		case <-p.Logs.Changed():
		case <-deadline:
			proctest.FatalOverrun(t, "%q logged %d times, want %d; log:\n%s", s, p.Logs.Count(s), n, p.Logs.Tail(20))
		}
	}
}

// storeErrorLines returns the log's ERROR lines of the store check.
func storeErrorLines(p *proctest.Proc) []string {
	var out []string
	for _, line := range strings.Split(p.Logs.String(), "\n") {
		if strings.Contains(line, `"level":"ERROR"`) && strings.Contains(line, "store unreachable") {
			out = append(out, line)
		}
	}
	return out
}

// TestBinaryNamesWrongRedisPassword runs the gateway with the wrong
// password for a real Redis: it logs one ERROR line naming WRONGPASS and
// which policies fail open and closed, serves by on_store_error, and logs
// the line again on a reload (SIGHUP).
func TestBinaryNamesWrongRedisPassword(t *testing.T) {
	srv := redistest.StartStandaloneWith(t, redistest.Options{Password: "right"})
	p := proctest.Start(t, proctest.Binary(t), proctest.Options{
		Args: []string{"-config", configFile(t, fmt.Sprintf(storeConfig, srv.Addr, ""))},
		Env:  proctest.Environ("QG_TEST_REDIS_PASSWORD=wrong"),
	})
	lines := storeErrorLines(p)
	if len(lines) != 1 {
		t.Fatalf("%d store ERROR lines at start, want 1; log:\n%s", len(lines), p.Logs.Tail(20))
	}
	for _, want := range []string{"WRONGPASS", `"fail_open":["lenient"]`, `"fail_closed":["strict"]`, `"fail_local":[]`} {
		if !strings.Contains(lines[0], want) {
			t.Fatalf("store ERROR line lacks %s: %s", want, lines[0])
		}
	}
	if code := get(t, p, "/open"); code != http.StatusOK {
		t.Fatalf("fail-open route: %d, want 200", code)
	}
	if code := get(t, p, "/closed"); code != http.StatusServiceUnavailable {
		t.Fatalf("fail-closed route: %d, want 503", code)
	}
	p.Signal(syscall.SIGHUP)
	waitLog(t, p, "store unreachable", 2)
	if lines := storeErrorLines(p); !strings.Contains(lines[1], "WRONGPASS") {
		t.Fatalf("store ERROR line after reload: %s", lines[1])
	}
}

// TestBinaryDecidesOverTLS runs the gateway against a real redis-server
// that speaks only TLS and requires a client certificate: decisions reach
// Redis (a burst of 2 admits 2 and denies the third, and the keys are
// there), no store error is logged, and the admin /config shows the TLS
// settings (files by path only).
func TestBinaryDecidesOverTLS(t *testing.T) {
	files := redistest.NewTLSFiles(t)
	srv := redistest.StartStandaloneWith(t, redistest.Options{Password: "pw", TLS: files})
	tlsSection := fmt.Sprintf("    tls: {enabled: true, ca_file: %q, cert_file: %q, key_file: %q, server_name: localhost}",
		files.CA, files.ClientCert, files.ClientKey)
	p := startBinary(t, fmt.Sprintf(storeConfig, srv.Addr, tlsSection), "QG_TEST_REDIS_PASSWORD=pw")
	for i, want := range []int{200, 200, 429} {
		if code := get(t, p, "/closed"); code != want {
			t.Fatalf("request %d over TLS: %d, want %d; log:\n%s", i, code, want, p.Logs.Tail(10))
		}
	}
	if keys, _ := srv.MustDo(t, "KEYS", "*").([]any); len(keys) == 0 {
		t.Fatal("no key in Redis after decisions over TLS")
	}
	if lines := storeErrorLines(p); len(lines) != 0 {
		t.Fatalf("store ERROR lines with TLS working: %v", lines)
	}
	checkConfigShowsTLS(t, p, files)
}

// checkConfigShowsTLS checks that the admin /config of p shows
// store.redis.tls as configured, files by path, and nothing they hold.
func checkConfigShowsTLS(t *testing.T, p *proctest.Proc, files *redistest.TLSFiles) {
	t.Helper()
	code, _, body := getStatus(t, p.AdminURL()+"/config", "")
	var cfg struct {
		Store struct {
			Redis struct {
				TLS map[string]any `json:"tls"`
			} `json:"redis"`
		} `json:"store"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &cfg) != nil {
		t.Fatalf("GET /config: %d %s", code, body)
	}
	want := map[string]any{"enabled": true, "ca_file": files.CA, "cert_file": files.ClientCert,
		"key_file": files.ClientKey, "server_name": "localhost"}
	if !maps.Equal(cfg.Store.Redis.TLS, want) {
		t.Errorf("/config store.redis.tls = %v, want %v", cfg.Store.Redis.TLS, want)
	}
	for _, secret := range []string{"-----BEGIN", "PRIVATE KEY", `"pw"`} {
		if strings.Contains(body, secret) {
			t.Errorf("/config shows %q: %s", secret, body)
		}
	}
}

// TestBinarySurvivesHostileRedis points the gateway at a TCP server that
// answers every command with a reply declaring 2^31-2 elements (16 GiB to
// a client that allocates by the declaration). The gateway must name the
// cause, keep serving by on_store_error, and its peak resident memory
// stay far below one such reply.
func TestBinarySurvivesHostileRedis(t *testing.T) {
	h := redistest.StartHostile(t, []byte("*2147483646\r\n"), "HELLO", "PING", "EVALSHA", "EVAL", "INFO")
	p := proctest.Start(t, proctest.Binary(t), proctest.Options{
		Args: []string{"-config", configFile(t, fmt.Sprintf(storeConfig, h.Addr, "    breaker_failures: 1000"))},
		Env:  proctest.Environ("QG_TEST_REDIS_PASSWORD="),
	})
	if lines := storeErrorLines(p); len(lines) != 1 || !strings.Contains(lines[0], "not a bounded Redis reply") {
		t.Fatalf("store ERROR lines at start: %v", lines)
	}
	for i := range 50 {
		if code := get(t, p, "/open"); code != http.StatusOK {
			t.Fatalf("request %d to a fail-open route: %d, want 200", i, code)
		}
		if code := get(t, p, "/closed"); code != http.StatusServiceUnavailable {
			t.Fatalf("request %d to a fail-closed route: %d, want 503", i, code)
		}
	}
	if n := h.Answered.Load(); n < 50 {
		t.Fatalf("the hostile server answered %d times, want every decision (>= 50)", n)
	}
	if p.Exited() {
		t.Fatalf("the gateway exited: %v", p.ExitErr())
	}
	peak := peakRSS(t, p.Cmd.Process.Pid)
	t.Logf("peak resident memory %d MiB after %d hostile replies", peak>>20, h.Answered.Load())
	if peak > 256<<20 {
		t.Fatalf("peak resident memory %d MiB: a hostile reply was allocated", peak>>20)
	}
}

// peakRSS returns a process's peak resident memory in bytes, skipping the
// test where the system does not tell.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	n, err := proctest.PeakRSS(pid)
	if errors.Is(err, proctest.ErrNoRSS) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestBinaryReportsToGlobalOverTLS runs a region's gateway whose global
// Redis speaks only TLS and requires a client certificate: the region's
// reports reach it (the owner's keys appear there under load), with the
// regional Redis in plain text beside it.
func TestBinaryReportsToGlobalOverTLS(t *testing.T) {
	regional := redistest.StartStandaloneWith(t, redistest.Options{})
	files := redistest.NewTLSFiles(t)
	global := redistest.StartStandaloneWith(t, redistest.Options{TLS: files})
	cfg := fmt.Sprintf(`server: {listen: "127.0.0.1:0", admin_listen: "127.0.0.1:0"}
store:
  kind: redis
  redis: {addrs: [%q], timeout: 200ms}
  region: eu
  global:
    redis:
      addrs: [%q]
      tls: {enabled: true, ca_file: %q, cert_file: %q, key_file: %q, server_name: localhost}
    report_interval: 100ms
identity: {anonymous: {tier: anonymous}}
tiers: {anonymous: {}}
policies:
  shared: {regions: {mode: leased, safe_share: 0.5}, limits: {"*": {rate: 100, per: 1s, burst: 100}}}
upstreams: {echo: {url: "echo:"}}
routes:
  - {name: shared.get, method: GET, path: /shared, upstream: echo, policies: [shared]}
`, regional.Addr, global.Addr, files.CA, files.ClientCert, files.ClientKey)
	p := startBinary(t, cfg)
	deadline := time.Now().Add(15 * time.Second)
	for {
		if code := get(t, p, "/shared"); code != http.StatusOK {
			t.Fatalf("GET /shared: %d, want 200; log:\n%s", code, p.Logs.Tail(10))
		}
		if keys, _ := global.MustDo(t, "KEYS", "*").([]any); len(keys) > 0 {
			break
		}
		if time.Now().After(deadline) {
			proctest.FatalOverrun(t, "no key in the global Redis over TLS after 15s of reports; log:\n%s", p.Logs.Tail(20))
		}
		time.Sleep(20 * time.Millisecond) // the load that makes the key hot; reports are what is awaited
	}
}
