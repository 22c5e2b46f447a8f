package rls

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit/memstore"
	"github.com/quotagate/quotagate/telemetry"
)

const testToken = "rls-test-token-0123456789"

// authServer is a served Server of testdata's rules with an rls.client_auth
// section, and the Prometheus handler of its metrics.
type authServer struct {
	grpcAddr, httpAddr string
	metrics            http.Handler
}

// serveAuth serves cfg's rls section (client_auth and tls included) on
// loopback listeners, with RLS_TOKEN holding testToken.
func serveAuth(t *testing.T, cfg *config.Config) *authServer {
	t.Helper()
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	m, err := telemetry.NewMetrics(tel.MeterProvider)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RLS.ConfigFiles = []string{"testdata/edge.yaml"}
	cfg.RLS.ShutdownDelay = 0
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { store.Close() })
	srv, err := NewServer(cfg, ServerOptions{Store: store, Metrics: m,
		Getenv: func(k string) (string, bool) { return testToken, k == "RLS_TOKEN" }})
	if err != nil {
		t.Fatal(err)
	}
	gl, hl := listeners(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, gl, hl, 5*time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &authServer{grpcAddr: gl.Addr().String(), httpAddr: hl.Addr().String(), metrics: tel.Metrics}
}

// refusals returns quotagate_rls_unauthenticated_total by "api/reason".
func (a *authServer) refusals(t *testing.T) map[string]int {
	t.Helper()
	rec := httptest.NewRecorder()
	a.metrics.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	out := map[string]int{}
	re := regexp.MustCompile(`(?m)^quotagate_rls_unauthenticated_total\{api="(\w+)",reason="(\w+)"[^}]*\} (\d+)$`)
	for _, m := range re.FindAllStringSubmatch(rec.Body.String(), -1) {
		n, _ := strconv.Atoi(m[3])
		out[m[1]+"/"+m[2]] = n
	}
	if len(out) != 8 {
		t.Fatalf("want the 8 series of quotagate_rls_unauthenticated_total, got %v in:\n%s", out, rec.Body.String())
	}
	return out
}

func dial(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// edgeCall is one hit on testdata's 10 a minute per remote_address.
func edgeCall(addr string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{pbDesc("remote_address", addr)}}
}

// checkCall posts body to /v1/check with the Authorization values auth.
func checkCall(t *testing.T, client *http.Client, url, body string, auth ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url+"/v1/check", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range auth {
		req.Header.Add("Authorization", a)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestClientAuthTokenGRPC: with rls.client_auth.token_env, a gRPC call
// without the token, with another, with another scheme or with two values
// is UNAUTHENTICATED and charges nothing; the token decides; health checks
// need none; each refusal is counted by reason.
func TestClientAuthTokenGRPC(t *testing.T) {
	cfg := config.Default()
	cfg.RLS.ClientAuth = &config.RLSClientAuth{TokenEnv: "RLS_TOKEN"}
	s := serveAuth(t, cfg)
	conn := dial(t, s.grpcAddr, insecure.NewCredentials())
	client := rlsv3.NewRateLimitServiceClient(conn)
	ctx := context.Background()

	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health without a token: %v, %v", h, err)
	}
	for _, tc := range []struct {
		name string
		md   []string
	}{
		{"none", nil},
		{"wrong", []string{"authorization", "Bearer not-the-token"}},
		{"prefix", []string{"authorization", "Bearer " + testToken[:len(testToken)-1]}},
		{"scheme", []string{"authorization", "Basic " + testToken}},
		{"bare", []string{"authorization", testToken}},
		{"empty", []string{"authorization", "Bearer "}},
		{"two", []string{"authorization", "Bearer " + testToken, "authorization", "Bearer x"}},
		{"other header", []string{"x-api-key", testToken}},
	} {
		cctx := ctx
		if tc.md != nil {
			cctx = metadata.AppendToOutgoingContext(ctx, tc.md...)
		}
		_, err := client.ShouldRateLimit(cctx, edgeCall("192.0.2.1"))
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: %v, want Unauthenticated", tc.name, err)
		}
	}
	for i, scheme := range []string{"Bearer ", "bearer  "} {
		resp, err := client.ShouldRateLimit(metadata.AppendToOutgoingContext(ctx, "authorization", scheme+testToken), edgeCall("192.0.2.1"))
		if err != nil {
			t.Fatalf("%q token: %v", scheme, err)
		}
		// The refused calls charged nothing: 10 a minute, one taken by
		// each call with the token.
		if want := uint32(9 - i); resp.GetStatuses()[0].GetLimitRemaining() != want {
			t.Errorf("%q: remaining %d, want %d", scheme, resp.GetStatuses()[0].GetLimitRemaining(), want)
		}
	}
	got := s.refusals(t)
	if got["grpc/no_token"] != 2 || got["grpc/bad_token"] != 6 || got["http/no_token"] != 0 {
		t.Errorf("refusals %v, want grpc/no_token 2 (none, other header), grpc/bad_token 6", got)
	}
}

// TestClientAuthTokenHTTP: the check API answers a call without the token
// 401 problem+json with WWW-Authenticate, whatever it asks (a dry_run
// read of remaining, another method); /healthz stays open.
func TestClientAuthTokenHTTP(t *testing.T) {
	cfg := config.Default()
	cfg.RLS.ClientAuth = &config.RLSClientAuth{TokenEnv: "RLS_TOKEN"}
	s := serveAuth(t, cfg)
	base := "http://" + s.httpAddr
	const read = `{"domain": "edge", "descriptors": [[{"key": "remote_address", "value": "192.0.2.9"}]], "dry_run": true}`
	for _, tc := range []struct {
		name, challenge string
		auth            []string
	}{
		{"none", `Bearer realm="quotagate-rls"`, nil},
		{"wrong", `Bearer realm="quotagate-rls", error="invalid_token"`, []string{"Bearer nope"}},
		{"basic", `Bearer realm="quotagate-rls", error="invalid_token"`, []string{"Basic " + testToken}},
		{"two", `Bearer realm="quotagate-rls", error="invalid_token"`, []string{"Bearer " + testToken, "Bearer " + testToken}},
	} {
		resp, body := checkCall(t, http.DefaultClient, base, read, tc.auth...)
		var p map[string]any
		if resp.StatusCode != 401 || resp.Header.Get("Content-Type") != "application/problem+json" || json.Unmarshal([]byte(body), &p) != nil ||
			p["error"] != "unauthenticated" || p["status"] != float64(401) || p["type"] != "urn:quotagate:problem:unauthenticated" {
			t.Errorf("%s: %d %s %s", tc.name, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		if got := resp.Header.Get("WWW-Authenticate"); got != tc.challenge {
			t.Errorf("%s: WWW-Authenticate %q, want %q", tc.name, got, tc.challenge)
		}
		if strings.Contains(body, "remaining") {
			t.Errorf("%s: a refused read shows remaining: %s", tc.name, body)
		}
	}
	resp, err := http.Get(base + "/v1/check")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("GET /v1/check without a token: %d, want 401 before 405", resp.StatusCode)
	}
	resp, body := checkCall(t, http.DefaultClient, base, read, "Bearer "+testToken)
	if resp.StatusCode != 200 || !strings.Contains(body, `"remaining":10`) {
		t.Errorf("with the token: %d %s", resp.StatusCode, body)
	}
	if resp, err = http.Get(base + "/healthz"); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/healthz without a token: %d", resp.StatusCode)
	}
	got := s.refusals(t)
	if got["http/no_token"] != 2 || got["http/bad_token"] != 3 || got["grpc/no_token"] != 0 {
		t.Errorf("refusals %v, want http/no_token 2 (none, GET), http/bad_token 3", got)
	}
}

// mtlsClients are client TLS configurations against a server of files.
func mtlsClients(t *testing.T, files *redistest.TLSFiles) map[string]*tls.Config {
	t.Helper()
	other := redistest.NewTLSFiles(t) // another CA and the client it signed
	strangerPair, err := tls.LoadX509KeyPair(other.ClientCert, other.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	serverPair, err := tls.LoadX509KeyPair(files.ServerCert, files.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*tls.Config{"good": files.ClientConfig()}
	for name, certs := range map[string][]tls.Certificate{
		"no certificate":     nil,
		"another CA":         {strangerPair},
		"server certificate": {serverPair}, // signed by the CA, but not for client authentication
	} {
		c := files.ClientConfig()
		c.Certificates = certs
		out[name] = c
	}
	return out
}

// TestClientAuthMTLS: with rls.client_auth.client_ca_file, a handshake on
// either listener without a client certificate, with one another CA
// signed, or with one not made for client authentication fails and is
// counted; one the CA signed for clients is served.
func TestClientAuthMTLS(t *testing.T) {
	files := redistest.NewTLSFiles(t)
	cfg := config.Default()
	cfg.RLS.TLS = &config.TLS{CertFile: files.ServerCert, KeyFile: files.ServerKey}
	cfg.RLS.ClientAuth = &config.RLSClientAuth{ClientCAFile: files.CA}
	s := serveAuth(t, cfg)
	for name, c := range mtlsClients(t, files) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := rlsv3.NewRateLimitServiceClient(dial(t, s.grpcAddr, credentials.NewTLS(c))).ShouldRateLimit(ctx, edgeCall("192.0.2.1"))
		cancel()
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: c}, Timeout: 5 * time.Second}
		req, _ := http.NewRequest("POST", "https://"+s.httpAddr+"/v1/check", strings.NewReader(`{"domain": "edge", "descriptors": [[{"key": "remote_address", "value": "192.0.2.1"}]]}`))
		resp, herr := hc.Do(req)
		if herr == nil {
			resp.Body.Close()
		}
		if name == "good" {
			if err != nil || herr != nil || resp.StatusCode != 200 {
				t.Errorf("%s: gRPC %v; HTTP %v %v", name, err, herr, resp)
			}
			continue
		}
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%s: gRPC %v, want the handshake to fail (Unavailable)", name, err)
		}
		if herr == nil {
			t.Errorf("%s: HTTP answered %d, want the handshake to fail", name, resp.StatusCode)
		}
	}
	got := s.refusals(t)
	for _, k := range []string{"grpc/no_certificate", "http/no_certificate"} {
		if got[k] < 1 {
			t.Errorf("%s = %d, want at least 1: %v", k, got[k], got)
		}
	}
	for _, k := range []string{"grpc/bad_certificate", "http/bad_certificate"} {
		if got[k] < 2 { // another CA, server certificate
			t.Errorf("%s = %d, want at least 2: %v", k, got[k], got)
		}
	}
}

// TestClientAuthTokenAndMTLS: with both set, a call needs both.
func TestClientAuthTokenAndMTLS(t *testing.T) {
	files := redistest.NewTLSFiles(t)
	cfg := config.Default()
	cfg.RLS.TLS = &config.TLS{CertFile: files.ServerCert, KeyFile: files.ServerKey}
	cfg.RLS.ClientAuth = &config.RLSClientAuth{TokenEnv: "RLS_TOKEN", ClientCAFile: files.CA}
	s := serveAuth(t, cfg)
	client := rlsv3.NewRateLimitServiceClient(dial(t, s.grpcAddr, credentials.NewTLS(files.ClientConfig())))
	if _, err := client.ShouldRateLimit(context.Background(), edgeCall("192.0.2.1")); status.Code(err) != codes.Unauthenticated {
		t.Errorf("certificate without the token: %v, want Unauthenticated", err)
	}
	if _, err := client.ShouldRateLimit(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+testToken), edgeCall("192.0.2.1")); err != nil {
		t.Errorf("certificate and token: %v", err)
	}
	noCert := files.ClientConfig()
	noCert.Certificates = nil
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: noCert}, Timeout: 5 * time.Second}
	req, _ := http.NewRequest("POST", "https://"+s.httpAddr+"/v1/check", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+testToken)
	if resp, err := hc.Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("token without a certificate: HTTP %d, want the handshake to fail", resp.StatusCode)
	}
}

// TestClientAuthTokenEnvMissing: a token_env whose variable is unset or
// empty fails NewServer with a config error naming the field.
func TestClientAuthTokenEnvMissing(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{nil, "rls.client_auth.token_env: environment variable RLS_TOKEN is not set"},
		{map[string]string{"RLS_TOKEN": ""}, "rls.client_auth.token_env: environment variable RLS_TOKEN is empty"},
	} {
		cfg := config.Default()
		cfg.RLS.ConfigFiles = []string{"testdata/edge.yaml"}
		cfg.RLS.ClientAuth = &config.RLSClientAuth{TokenEnv: "RLS_TOKEN"}
		store := memstore.New(memstore.Options{})
		_, err := NewServer(cfg, ServerOptions{Store: store, Getenv: func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }})
		store.Close()
		var errs config.Errors
		if !errors.As(err, &errs) || err.Error() != tc.want {
			t.Errorf("err = %v (%T), want config.Errors %q", err, err, tc.want)
		}
	}
}

// TestServeRefusesExposedWithoutClientAuth: validation checks the host
// written; Serve checks the address bound, so a listener beyond loopback
// without rls.client_auth serves nothing, while none: true serves it.
func TestServeRefusesExposedWithoutClientAuth(t *testing.T) {
	l, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Skipf("cannot listen on every interface: %v", err)
	}
	srv := newMemoryServer(t)
	err = srv.Serve(context.Background(), l, nil, time.Second)
	if err == nil || !strings.Contains(err.Error(), "rls.client_auth: is required") {
		t.Fatalf("Serve = %v, want rls.client_auth: is required", err)
	}
	l.Close()

	cfg := config.Default()
	cfg.RLS.ClientAuth = &config.RLSClientAuth{None: true}
	cfg.RLS.ConfigFiles = []string{"testdata/edge.yaml"}
	cfg.RLS.ShutdownDelay = 0
	store := memstore.New(memstore.Options{})
	defer store.Close()
	open, err := NewServer(cfg, ServerOptions{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	if l, err = net.Listen("tcp", "0.0.0.0:0"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- open.Serve(ctx, l, nil, time.Second) }()
	port := l.Addr().(*net.TCPAddr).Port
	conn := dial(t, "127.0.0.1:"+strconv.Itoa(port), insecure.NewCredentials())
	if _, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), edgeCall("192.0.2.1")); err != nil {
		t.Errorf("none: true: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
}
