package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// findNginx returns nginx's path from PATH or /usr/sbin, or "" when it is
// not installed.
func findNginx() string {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx"} {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	return ""
}

// nginxVersion returns what "nginx -v" prints, trimmed.
func nginxVersion(bin string) string {
	out, err := exec.Command(bin, "-v").CombinedOutput()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "nginx version: "))
}

// nginxConfig is a minimal nginx.conf: one worker per core, limit_req keyed
// by the Authorization header at rate requests per second with a burst of
// rate (nodelay, 429 on deny), keep-alive to the upstream and to clients
// without a per-connection request cap (as the Go contenders have none),
// every file under dir.
func nginxConfig(dir string, port int, upstreamHostPort string, rate int) string {
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;\n" // otherwise workers would switch to nobody
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	return fmt.Sprintf(`# Written by quotagate-bench.
%sworker_processes %d;
daemon off;
master_process on;
pid %s;
error_log %s warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path %s;
    proxy_temp_path %s;
    fastcgi_temp_path %s;
    uwsgi_temp_path %s;
    scgi_temp_path %s;
    keepalive_requests 1000000;
    limit_req_zone $http_authorization zone=bench:16m rate=%dr/s;
    limit_req_status 429;
    upstream up {
        server %s;
        keepalive 256;
        keepalive_requests 1000000;
    }
    server {
        listen %s;
        location / {
            limit_req zone=bench burst=%d nodelay;
            proxy_pass http://up;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
`, user, runtime.NumCPU(), p("nginx.pid"), p("nginx-error.log"),
		p("client_body"), p("proxy"), p("fastcgi"), p("uwsgi"), p("scgi"),
		rate, upstreamHostPort, "127.0.0.1:"+strconv.Itoa(port), rate)
}

// startNginx writes nginx.conf into its own directory and starts nginx in
// the foreground with that prefix. Its master gets SIGTERM if this process
// dies, and stops its workers.
func startNginx(e *env, c *contender) error {
	dir := filepath.Join(e.dir, "nginx")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	conf := filepath.Join(dir, "nginx.conf")
	up := strings.TrimPrefix(e.upstream, "http://")
	if err := os.WriteFile(conf, []byte(nginxConfig(dir, port, up, e.rate)), 0o644); err != nil {
		return err
	}
	cmd := exec.Command(e.nginxBin, "-p", dir+"/", "-c", conf, "-e", filepath.Join(dir, "nginx-error.log"))
	p, err := e.ps.start(c.name, cmd, syscall.SIGTERM, nil)
	if err != nil {
		return err
	}
	c.proc = p
	c.base = "http://127.0.0.1:" + strconv.Itoa(port)
	c.logFile = filepath.Join(dir, "nginx-error.log")
	return nil
}
