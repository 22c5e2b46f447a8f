package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/config"
)

// TestAdminHostRule: the Host values the admin listener answers for.
func TestAdminHostRule(t *testing.T) {
	a, err := newAdminAccess(&config.Config{Server: config.Server{
		AdminListen: "GW-Admin.internal:9090",
		AdminHosts:  []string{"admin.example.com", "metrics.internal"}, // lowercased by Validate
	}}, testGetenv)
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{
		"", // HTTP/1.0 without Host: no browser sends that
		"127.0.0.1", "127.0.0.1:9090", "[::1]", "[::1]:9090", "::1",
		"10.1.2.3:9090", "192.0.2.7", "[2001:db8::7]:9090", // kubelet and Prometheus send the target's IP
		"localhost", "localhost:19090", "LocalHost:9090", // any port: kubectl port-forward
		"gw-admin.internal", "gw-admin.internal:9090", // the host of admin_listen
		"admin.example.com", "Admin.Example.COM:443", "metrics.internal:9090",
	} {
		if !a.answersHost(host) {
			t.Errorf("Host %q refused, want it answered", host)
		}
	}
	for _, host := range []string{
		"evil.example", "evil.example:9090", "localhost.evil.example", "admin.example.com.evil.example",
		"localhost.", "admin.example.com.", "app.localhost", "sub.admin.example.com",
		"2130706433:9090", "127.1", "0x7f.0.0.1", "[evil.example]", "localhost:9090:9090",
	} {
		if a.answersHost(host) {
			t.Errorf("Host %q answered, want it refused", host)
		}
	}
	// The machine's hostname is not answered unless configured.
	if h, err := os.Hostname(); err == nil && h != "" && !strings.EqualFold(h, "localhost") && a.answersHost(h) {
		t.Errorf("the hostname %q is answered without being in admin_hosts", h)
	}
}

// TestAdminRefusesForeignHosts: through Serve, a Host the admin listener
// does not answer for gets 421 misdirected_request problem+json on every
// endpoint, open and protected alike; an IP literal, localhost and a
// configured name reach the endpoints. A reload's admin_hosts take effect.
func TestAdminRefusesForeignHosts(t *testing.T) {
	f := mustAdminGateway(t, "  admin_hosts: [Admin.Example.com]\n  pprof: true\n")
	admin := f.serveAdminOn(t, "127.0.0.1:0")
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(admin, "http://"))
	get := func(path, host string) adminAnswer {
		t.Helper()
		req, err := http.NewRequest("GET", admin+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return adminAnswer{resp.StatusCode, resp.Header, string(b)}
	}
	paths := []string{"/healthz", "/readyz", "/metrics", "/", "/config", "/hotkeys", "/console/state", "/debug/pprof/", "/no-such-page"}
	for _, host := range []string{"evil.example", "evil.example:" + port, "rebound.attacker.example:" + port, "localhost.:" + port} {
		for _, path := range paths {
			a := get(path, host)
			checkProblem(t, path+" with Host "+host, a, http.StatusMisdirectedRequest, codeMisdirected)
			if !strings.Contains(a.body, "server.admin_hosts") {
				t.Errorf("%s with Host %s: the 421 does not name server.admin_hosts: %s", path, host, a.body)
			}
		}
	}
	want := map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 404 /* the test's metrics handler */, "/config": 200, "/debug/pprof/": 200}
	for _, host := range []string{"127.0.0.1:" + port, "[::1]:" + port, "10.1.2.3:9090", "localhost:" + port, "localhost", "admin.example.com:" + port} {
		for path, code := range want {
			if a := get(path, host); a.code != code {
				t.Errorf("%s with Host %s: %d %s, want %d", path, host, a.code, clip(a.body, 200), code)
			}
		}
	}

	cfg, err := config.Load(f.path, adminEnv)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Server.AdminHosts = []string{"other.example"}
	if err := f.gw.Reload(cfg, 0); err != nil {
		t.Fatal(err)
	}
	if a := get("/config", "other.example:"+port); a.code != http.StatusOK {
		t.Errorf("/config with a Host added by a reload: %d, want 200", a.code)
	}
	if a := get("/config", "admin.example.com"); a.code != http.StatusMisdirectedRequest {
		t.Errorf("/config with a Host a reload removed: %d, want 421", a.code)
	}
}

// TestAdminAnswersHTTP10WithoutHost: a request without Host (HTTP/1.0,
// which simple health checkers send and no browser does) is answered.
func TestAdminAnswersHTTP10WithoutHost(t *testing.T) {
	f := mustAdminGateway(t, "")
	admin := f.serveAdminOn(t, "127.0.0.1:0")
	conn, err := net.Dial("tcp", strings.TrimPrefix(admin, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("HTTP/1.0 /healthz without Host: %d, want 200", resp.StatusCode)
	}
}

// TestAdminClosesIdleConnections: a kept-alive admin connection is closed
// by the server once it has been idle for server.idle_timeout (it used to
// stay open for as long as the client liked).
func TestAdminClosesIdleConnections(t *testing.T) {
	const idle = 300 * time.Millisecond
	f := mustAdminGateway(t, "  idle_timeout: 300ms\n")
	admin := f.serveAdminOn(t, "127.0.0.1:0")
	conn, err := net.Dial("tcp", strings.TrimPrefix(admin, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	for i := range 2 { // the connection is kept alive between requests
		if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("request %d: %d, close %v; want 200 on a kept-alive connection", i+1, resp.StatusCode, resp.Close)
		}
	}
	start := time.Now()
	// The deadline only bounds a failure: the server closes long before,
	// and well before the read timeout (10 s), which net/http would use
	// for idle connections too if the idle timeout were not set.
	_ = conn.SetReadDeadline(time.Now().Add(idle + 5*time.Second))
	n, err := br.Read(make([]byte, 1))
	var ne net.Error
	switch {
	case n > 0:
		t.Fatalf("the server sent a byte on an idle connection")
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("the idle connection was still open after %v (idle_timeout %v)", time.Since(start), idle)
	case err == nil:
		t.Fatalf("read returned nothing and no error")
	}
	if el := time.Since(start); el < idle/3 {
		t.Errorf("the connection closed after %v idle, well before idle_timeout %v", el, idle)
	}
}

// TestAdminWriteTimeout: an admin answer that takes longer than the write
// timeout is cut off (here a /metrics handler that stalls), but a CPU
// profile that streams for longer is not: pprof moves the deadline by the
// seconds asked, so sizing the timeout for /metrics and /config costs the
// profiles nothing.
func TestAdminWriteTimeout(t *testing.T) {
	old := adminWriteTimeout
	adminWriteTimeout = 500 * time.Millisecond
	t.Cleanup(func() { adminWriteTimeout = old })
	f := mustAdminGateway(t, "  pprof: true\n")
	stalled := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(3 * adminWriteTimeout) // a scrape that outlasts the write timeout
		_, _ = io.WriteString(w, "too late")
	})
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	al, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.gw.Serve(ctx, pl, al, f.gw.Admin(stalled)) }()
	t.Cleanup(func() { cancel(); <-done })
	admin := "http://" + al.Addr().String()

	c := &http.Client{Timeout: 20 * time.Second}
	if resp, err := c.Get(admin + "/metrics"); err == nil {
		b, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		if rerr == nil {
			t.Errorf("a /metrics answer written after the write timeout arrived: %d %q", resp.StatusCode, b)
		}
	}
	a := adminGet(t, admin+"/debug/pprof/profile?seconds=2", "")
	if a.code != http.StatusOK || !strings.HasPrefix(a.body, "\x1f\x8b") { // a gzipped profile
		t.Errorf("a 2 s profile under a write timeout of %v: %d %q, want 200 and the profile", adminWriteTimeout, a.code, clip(a.body, 100))
	}
}

// clip returns s, cut to n bytes for a failure message.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
