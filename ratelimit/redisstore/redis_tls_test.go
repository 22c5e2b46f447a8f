package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
)

// TestRedisStoreOverTLS decides against a real redis-server that speaks
// only TLS and authenticates clients by certificate, and checks that the
// wrong trust, a missing client certificate, or plain TCP fail with a
// cause that names TLS (or no answer) rather than a decision.
func TestRedisStoreOverTLS(t *testing.T) {
	files := redistest.NewTLSFiles(t)
	srv := redistest.StartStandaloneWith(t, redistest.Options{TLS: files})
	it := tb("{tls}k", 10, 2, time.Hour, 1)

	good := redisstore.TLSFiles{CAFile: files.CA, CertFile: files.ClientCert, KeyFile: files.ClientKey}
	conf, err := good.Config()
	if err != nil {
		t.Fatal(err)
	}
	client := redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{srv.Addr}, TLS: conf, DialTimeout: 2 * time.Second})
	s := redisstore.NewRedisStore(client, redisstore.RedisOptions{Timeout: 2 * time.Second})
	defer s.Close()
	for i, want := range []bool{true, true, false} {
		if d := mustDecide(t, s, it); d.Allowed != want {
			t.Fatalf("decision %d over TLS: allowed %v, want %v", i, d.Allowed, want)
		}
	}
	if err := redisstore.PingRedis(context.Background(), client); err != nil {
		t.Fatalf("PingRedis over TLS: %v", err)
	}

	for _, c := range []struct {
		name  string
		files redisstore.TLSFiles
		plain bool
		want  string
	}{
		{"untrusted server", redisstore.TLSFiles{CAFile: files.OtherCA, CertFile: files.ClientCert, KeyFile: files.ClientKey}, false, "TLS handshake failed"},
		{"wrong server name", redisstore.TLSFiles{CAFile: files.CA, CertFile: files.ClientCert, KeyFile: files.ClientKey, ServerName: "redis.example"}, false, "TLS handshake failed"},
		// With TLS 1.3 the server refuses the missing certificate after the
		// client's side of the handshake is done: an alert or a reset.
		{"no client certificate", redisstore.TLSFiles{CAFile: files.CA}, false, "TLS handshake failed|closed the connection"},
		{"plain TCP", redisstore.TLSFiles{}, true, "does it require TLS"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := redisstore.RedisClientOptions{Addrs: []string{srv.Addr}, DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second}
			if !c.plain {
				conf, err := c.files.Config()
				if err != nil {
					t.Fatal(err)
				}
				o.TLS = conf
			}
			client := redisstore.NewRedisClient(o)
			s := redisstore.NewRedisStore(client, redisstore.RedisOptions{Timeout: 2 * time.Second})
			defer s.Close()
			if _, err := s.Decide(context.Background(), []ratelimit.Item{it}); !errors.Is(err, ratelimit.ErrUnavailable) {
				t.Fatalf("Decide = %v, want ErrUnavailable", err)
			}
			err := redisstore.PingRedis(context.Background(), client)
			if err == nil || !containsAny(err.Error(), strings.Split(c.want, "|")) {
				t.Fatalf("PingRedis = %v, want an error naming %q", err, c.want)
			}
			t.Logf("PingRedis: %v", err)
		})
	}
}

// TestRedisTLSFilesConfig checks the errors of loading TLS files.
func TestRedisTLSFilesConfig(t *testing.T) {
	files := redistest.NewTLSFiles(t)
	for _, c := range []struct {
		name  string
		files redisstore.TLSFiles
		want  string
	}{
		{"missing CA", redisstore.TLSFiles{CAFile: files.CA + ".missing"}, "ca_file: open"},
		{"CA not PEM", redisstore.TLSFiles{CAFile: files.ClientKey}, "holds no PEM certificate"},
		{"cert without key", redisstore.TLSFiles{CertFile: files.ClientCert}, "both or neither"},
		{"key of another cert", redisstore.TLSFiles{CertFile: files.ClientCert, KeyFile: files.ServerKey}, "cert_file, key_file"},
	} {
		if _, err := c.files.Config(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
