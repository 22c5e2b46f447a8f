package redistest

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if to := os.Getenv("REDISTEST_PROXY_TO"); to != "" {
		os.Exit(proxy(to, os.Args))
	}
	os.Exit(RunMain(m))
}

func TestStandaloneLifecycle(t *testing.T) {
	start := time.Now()
	s := StartStandalone(t)
	t.Logf("standalone up in %v", time.Since(start))
	s.MustDo(t, "SET", "k", "v")
	if got := s.MustDo(t, "GET", "k"); got != "v" {
		t.Fatalf("GET k = %v, want v", got)
	}

	s.Pause()
	c, err := dial(s.Addr, time.Second)
	if err != nil {
		t.Fatalf("dial paused server: %v", err) // the kernel still accepts
	}
	if _, err := c.do(100*time.Millisecond, "PING"); err == nil {
		t.Fatal("PING on a paused server answered")
	}
	c.close()
	s.Resume()
	if got := s.MustDo(t, "GET", "k"); got != "v" {
		t.Fatalf("GET k after resume = %v, want v", got)
	}

	s.Kill()
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("PING on a killed server answered")
	}
	addr := s.Addr
	s.Restart()
	if s.Addr != addr {
		t.Fatalf("restart moved the server from %s to %s", addr, s.Addr)
	}
	if got := s.MustDo(t, "GET", "k"); got != nil {
		t.Fatalf("GET k after restart = %v, want nil (empty server)", got)
	}
}

func TestShared(t *testing.T) {
	a, b := Shared(t), Shared(t)
	if a != b {
		t.Fatal("Shared started two servers")
	}
	p1, p2 := KeyPrefix(t), KeyPrefix(t)
	if p1 == p2 || strings.ContainsAny(p1, "{}") {
		t.Fatalf("prefixes %q %q: want distinct and without braces", p1, p2)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Kill on the shared server did not panic")
			}
		}()
		a.Kill()
	}()
	a.MustDo(t, "PING")
}

func TestCluster(t *testing.T) {
	start := time.Now()
	c := StartCluster(t, 3)
	t.Logf("3-node cluster ok in %v", time.Since(start))
	if len(c.Addrs()) != 3 {
		t.Fatalf("Addrs = %v", c.Addrs())
	}
	for _, key := range []string{"plain", "{acme}:a", "{acme}:b", "x{}y", "{}", "a{b}c{d}", "{tenant-42}route"} {
		n := c.Nodes()[0]
		got := n.MustDo(t, "CLUSTER", "KEYSLOT", key)
		if got != int64(Slot(key)) {
			t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT = %v", key, Slot(key), got)
		}
		owner := c.PrimaryForKey(key)
		// The owner accepts the key; any other node redirects.
		for _, s := range c.Nodes() {
			_, err := s.Do("SET", key, "v")
			if s == owner && err != nil {
				t.Errorf("owner %s refused %q: %v", s.Addr, key, err)
			}
			if s != owner && (err == nil || !strings.HasPrefix(err.Error(), "MOVED")) {
				t.Errorf("non-owner %s on %q: err = %v, want MOVED", s.Addr, key, err)
			}
		}
	}
	victim := c.PrimaryForKey("{acme}:a")
	victim.Kill()
	if _, err := victim.Do("PING"); err == nil {
		t.Fatal("killed node answered")
	}
}

// TestTLSAndPassword starts a server that speaks only TLS, wants a client
// certificate and a password, and checks that each is enforced.
func TestTLSAndPassword(t *testing.T) {
	files := NewTLSFiles(t)
	s := StartStandaloneWith(t, Options{Password: "s3cret", TLS: files})
	s.MustDo(t, "SET", "k", "v")
	if got := s.MustDo(t, "GET", "k"); got != "v" {
		t.Fatalf("GET k = %v, want v", got)
	}
	// Plain TCP to the TLS port is not Redis talking.
	if c, err := dial(s.Addr, time.Second); err == nil {
		_, err := c.do(time.Second, "PING")
		c.close()
		if err == nil {
			t.Fatal("plain PING to the TLS port answered")
		}
	}
	// Without the password: NOAUTH.
	noPass := &Server{Addr: s.Addr, tls: s.tls}
	if _, err := noPass.Do("PING"); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("PING without AUTH: %v, want NOAUTH", err)
	}
	// Without a client certificate the handshake or the first read fails.
	noCert := &Server{Addr: s.Addr, password: s.password, tls: files.ClientConfig()}
	noCert.tls.Certificates = nil
	if _, err := noCert.Do("PING"); err == nil {
		t.Fatal("PING without a client certificate answered")
	}
}

// TestWrappedStartRetries: a server started under a wrapper command is
// retried on other ports when its start fails, as any server is: here the
// wrapper's first run exits at once (as redis-server does when its port
// was taken), or puts another server on the port (a proxy to one), which
// the harness must not take for its own. Shutdown then stops the server
// cleanly.
func TestWrappedStartRetries(t *testing.T) {
	other := StartStandalone(t)
	for _, c := range []struct{ name, first string }{
		{"exits", `exit 1`},
		{"other_server", `REDISTEST_PROXY_TO=` + other.Addr + ` exec "` + os.Args[0] + `" "$@"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			runs := filepath.Join(t.TempDir(), "runs")
			script := `r=$1; shift; echo run >> "$r"; if [ "$(wc -l < "$r")" -eq 1 ]; then ` + c.first + `; fi; exec "$@"`
			s := StartStandaloneWith(t, Options{Wrap: []string{"sh", "-c", script, "wrapper", runs}})
			if b, _ := os.ReadFile(runs); strings.Count(string(b), "run") != 2 {
				t.Errorf("the wrapper ran %d times, want 2 (a failed start, then the server)", strings.Count(string(b), "run"))
			}
			if s.MustDo(t, "SET", "k", "v"); other.MustDo(t, "GET", "k") != nil {
				t.Error("the harness took the other server for its own")
			}
			s.Shutdown(t, StartTimeout)
			if _, err := s.Do("PING"); err == nil {
				t.Error("PING answered after Shutdown")
			}
		})
	}
}

// proxy is the test binary run as a wrapper (see TestWrappedStartRetries)
// in place of redis-server: it listens on the port of redis-server's
// arguments and forwards every connection to the server at to.
func proxy(to string, args []string) int {
	i := slices.Index(args, "--port")
	if i < 0 || i+1 >= len(args) {
		return 2
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+args[i+1])
	if err != nil {
		return 1
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return 1
		}
		go func() {
			defer c.Close()
			u, err := net.Dial("tcp", to)
			if err != nil {
				return
			}
			defer u.Close()
			go func() { _, _ = io.Copy(u, c) }()
			_, _ = io.Copy(c, u)
		}()
	}
}
