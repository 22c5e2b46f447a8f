package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestAdminHostAndIdle runs the binary with its admin listener on loopback
// (no admin token, so /config is served there), server.admin_hosts naming
// one host and a short server.idle_timeout, both set from the environment.
//
// A Host the listener does not answer for, as a page in a browser sends it
// after re-binding its own name to 127.0.0.1, gets 421 misdirected_request
// problem+json on /config, /metrics and /healthz (it used to get the
// configuration). IP literals (the pod IP kubelet and Prometheus send),
// localhost and the configured name are answered. An idle admin connection
// is closed by the server after the idle timeout (it used to stay open).
func TestAdminHostAndIdle(t *testing.T) {
	const idle = time.Second
	up := startUpstream(t)
	cfg := limiterConfig(up.URL(), nil, "acme")
	cfg.route("ok.get", "GET", "/ok/{rest...}", 1)
	gw := startGateway(t, "gw", cfg, withEnv("QUOTAGATE_SERVER_ADMIN_HOSTS=Admin.Example.test"), withEnv("QUOTAGATE_SERVER_IDLE_TIMEOUT=1s"))
	addr := strings.TrimPrefix(gw.Admin, "http://")
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	adminGet := func(path, host string) rawResponse {
		t.Helper()
		return rawStatus(t, addr, "GET "+path+" HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
	}

	for _, host := range []string{"rebound.attacker.example:" + port, "rebound.attacker.example", "localhost.attacker.example:" + port, "admin.example.test.attacker.example"} {
		for _, path := range []string{"/config", "/metrics", "/healthz"} {
			r := adminGet(path, host)
			var p struct {
				Error, Message string
				Status         int
			}
			if r.status != http.StatusMisdirectedRequest || r.header.Get("Content-Type") != "application/problem+json" ||
				json.Unmarshal([]byte(r.body), &p) != nil || p.Error != "misdirected_request" || p.Status != 421 ||
				!strings.Contains(p.Message, "server.admin_hosts") {
				t.Errorf("%s with Host %s: %d %s %s, want 421 problem+json misdirected_request", path, host, r.status, r.header.Get("Content-Type"), truncate(r.body, 200))
			}
			if strings.Contains(r.body, "acme") || strings.Contains(r.body, "quotagate_") {
				t.Errorf("%s with Host %s: the refusal shows the configuration or metrics: %s", path, host, truncate(r.body, 200))
			}
		}
	}
	for _, host := range []string{"127.0.0.1:" + port, "127.0.0.1", "[::1]:" + port, "10.0.0.7:9090", "localhost:" + port, "LOCALHOST", "admin.example.test", "Admin.Example.Test:" + port} {
		if r := adminGet("/config", host); r.status != http.StatusOK || !strings.Contains(r.body, `"admin_hosts"`) {
			t.Errorf("/config with Host %s: %d %s, want 200 and the configuration", host, r.status, truncate(r.body, 200))
		}
		if r := adminGet("/metrics", host); r.status != http.StatusOK || !strings.Contains(r.body, "quotagate_") {
			t.Errorf("/metrics with Host %s: %d %s, want 200 and the metrics", host, r.status, truncate(r.body, 200))
		}
	}

	// An idle kept-alive connection: one request, then nothing.
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:"+port+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("/healthz: %d, close %v; want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
	}
	start := time.Now()
	// The deadline bounds a failure only; it is well below the admin
	// listener's read timeout (10 s), which would close the connection too
	// if no idle timeout were set.
	_ = conn.SetReadDeadline(start.Add(idle + 5*time.Second))
	n, err := br.Read(make([]byte, 1))
	var ne net.Error
	switch {
	case n > 0:
		t.Fatal("the server sent a byte on an idle connection")
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("the idle admin connection was still open after %v (server.idle_timeout %v)", time.Since(start), idle)
	case err == nil:
		t.Fatal("read returned nothing and no error")
	}
	if el := time.Since(start); el < idle/2 {
		t.Errorf("the connection closed after %v idle, well before server.idle_timeout %v", el, idle)
	}
}
