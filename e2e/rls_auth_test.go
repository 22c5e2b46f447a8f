package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/internal/redistest"
)

const rlsE2EToken = "e2e-rls-token-5f1c0a9d"

// rlsAuthConfig is a gateway whose decision service listens on every
// interface (port 0), deciding on Redis at addr under prefix, with the
// given extra rls keys (client_auth, tls).
func rlsAuthConfig(t *testing.T, addr, prefix, extra string) string {
	t.Helper()
	files, _ := json.Marshal(rlsFiles)
	cfg := fmt.Sprintf(`server: {listen: "127.0.0.1:0", admin_listen: "127.0.0.1:0"}
store:
  kind: redis
  redis: {addrs: [%q], timeout: 200ms, key_prefix: %q}
identity: {anonymous: {tier: anonymous}}
tiers: {anonymous: {}}
upstreams: {app: {url: "echo:"}}
routes: [{name: app, method: GET, path: /, upstream: app}]
rls:
  listen: "0.0.0.0:0"
  http_listen: "0.0.0.0:0"
  config_files: %s
  shutdown_delay: 0s
%s`, addr, prefix, files, extra)
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startRLSAuth runs the binary on config path with env added to the
// environment and returns the loopback addresses of its gRPC and HTTP
// listeners (bound on every interface).
func startRLSAuth(t *testing.T, name, path string, env ...string) (proc *proctest.Proc, grpcAddr, httpAddr string) {
	t.Helper()
	p := proctest.Start(t, proctest.Binary(t), proctest.Options{Name: name, Args: []string{"-config", path},
		Env: append(os.Environ(), env...)})
	var rec struct{ Listen, HTTP_Listen string }
	if line, ok := p.Logs.WaitLine(`"msg":"rls started"`, proctest.StartTimeout); ok {
		_ = json.Unmarshal([]byte(line), &rec)
	}
	loop := func(a string) string {
		_, port, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatalf("%s: no \"rls started\" line with both addresses:\n%s", name, p.Logs.Tail(20))
		}
		return net.JoinHostPort("127.0.0.1", port)
	}
	return p, loop(rec.Listen), loop(rec.HTTP_Listen)
}

// rlsRefusals is quotagate_rls_unauthenticated_total of p by "api/reason".
func rlsRefusals(t *testing.T, p *proctest.Proc) map[string]string {
	t.Helper()
	out := map[string]string{}
	re := regexp.MustCompile(`(?m)^quotagate_rls_unauthenticated_total\{api="(\w+)",reason="(\w+)"[^}]*\} (\S+)$`)
	for _, m := range re.FindAllStringSubmatch(p.Metrics(), -1) {
		out[m[1]+"/"+m[2]] = m[3]
	}
	return out
}

// postCheck posts body to the check API at base with the Authorization
// header auth (none when empty).
func postCheck(t *testing.T, client *http.Client, base, body, auth string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", base+"/v1/check", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRLSAuthRequiredBeyondLoopback: a decision service bound to every
// interface without rls.client_auth does not start (exit 1, naming the
// field and why), nor does one whose token variable is unset; `validate`
// says the same.
func TestRLSAuthRequiredBeyondLoopback(t *testing.T) {
	rs := redistest.StartStandalone(t)
	for _, tc := range []struct {
		name, extra, want string
	}{
		{"open", "", "rls.client_auth: is required: rls.listen \"0.0.0.0:0\" is not a loopback address"},
		{"unset", "  client_auth: {token_env: QUOTAGATE_E2E_RLS_TOKEN_UNSET}\n", "rls.client_auth.token_env: environment variable QUOTAGATE_E2E_RLS_TOKEN_UNSET is not set"},
	} {
		path := rlsAuthConfig(t, rs.Addr, rlsPrefix(), tc.extra)
		p := proctest.Start(t, proctest.Binary(t), proctest.Options{Name: tc.name, NoListen: true, Args: []string{"-config", path}})
		var ee *exec.ExitError
		if err := p.Wait(proctest.StartTimeout); !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("%s: exit %v, want status 1", tc.name, err)
		}
		if !strings.Contains(p.Logs.String(), tc.want) {
			t.Errorf("%s: output lacks %q:\n%s", tc.name, tc.want, p.Logs.Tail(10))
		}
	}
	path := rlsAuthConfig(t, rs.Addr, rlsPrefix(), "")
	out, err := exec.Command(proctest.Binary(t), "validate", "-config", path).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "rls.client_auth: is required") {
		t.Errorf("validate: %v\n%s", err, out)
	}
}

// TestRLSAuthToken is the attack, against the real binary on
// every interface with real Redis: a stranger without the token, or with
// a wrong one, can neither read a victim descriptor's remaining (a
// dry_run check) nor spend it, over gRPC or HTTP; the victim's counter is
// untouched; the token works; health checks need none; refusals are
// counted.
func TestRLSAuthToken(t *testing.T) {
	rs := redistest.StartStandalone(t)
	path := rlsAuthConfig(t, rs.Addr, rlsPrefix(), "  client_auth: {token_env: QUOTAGATE_E2E_RLS_TOKEN}\n")
	p, grpcAddr, httpAddr := startRLSAuth(t, "rls-token", path, "QUOTAGATE_E2E_RLS_TOKEN="+rlsE2EToken)
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	victim := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{pbDescriptor("remote_address", "198.51.100.7")}}

	if h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health without a token: %v %v", h, err)
	}
	for name, md := range map[string][]string{"no token": nil, "wrong token": {"authorization", "Bearer guessed"}} {
		cctx := ctx
		if md != nil {
			cctx = metadata.AppendToOutgoingContext(ctx, md...)
		}
		for range 3 {
			if _, err := client.ShouldRateLimit(cctx, victim); status.Code(err) != codes.Unauthenticated {
				t.Fatalf("gRPC %s: %v, want Unauthenticated", name, err)
			}
		}
	}
	base := "http://" + httpAddr
	const read = `{"domain": "edge", "descriptors": [[{"key": "remote_address", "value": "198.51.100.7"}]], "dry_run": true}`
	const spend = `{"domain": "edge", "descriptors": [[{"key": "remote_address", "value": "198.51.100.7"}]], "hits": 10}`
	for _, auth := range []string{"", "Bearer guessed", "Bearer " + rlsE2EToken + "x"} {
		for _, body := range []string{read, spend} {
			code, out := postCheck(t, http.DefaultClient, base, body, auth)
			if code != 401 || !strings.Contains(out, `"error":"unauthenticated"`) || strings.Contains(out, "remaining") {
				t.Errorf("HTTP with %q: %d %s, want 401 unauthenticated without remaining", auth, code, out)
			}
		}
	}
	resp, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/healthz without a token: %d", resp.StatusCode)
	}
	// The victim's counter is untouched: its own call sees 10 of 10 less
	// one, and a dry_run read with the token sees what is left.
	out, err := client.ShouldRateLimit(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+rlsE2EToken), victim)
	if err != nil {
		t.Fatalf("gRPC with the token: %v", err)
	}
	if r := out.GetStatuses()[0].GetLimitRemaining(); out.GetOverallCode() != rlsv3.RateLimitResponse_OK || r != 9 {
		t.Errorf("with the token: %v remaining %d, want OK with 9 (the refused calls spent nothing)", out.GetOverallCode(), r)
	}
	if code, body := postCheck(t, http.DefaultClient, base, read, "Bearer "+rlsE2EToken); code != 200 || !strings.Contains(body, `"remaining":9`) {
		t.Errorf("HTTP dry_run with the token: %d %s", code, body)
	}
	got := rlsRefusals(t, p)
	want := map[string]string{"grpc/no_token": "3", "grpc/bad_token": "3", "http/no_token": "2", "http/bad_token": "4",
		"grpc/no_certificate": "0", "grpc/bad_certificate": "0", "http/no_certificate": "0", "http/bad_certificate": "0"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("quotagate_rls_unauthenticated_total %s = %q, want %s (all: %v)", k, got[k], v, got)
		}
	}
}

// TestRLSAuthMTLS: with rls.client_auth.client_ca_file, a handshake
// without a client certificate (or with one another CA signed) fails on
// both listeners and decides nothing; the CA's client certificate is
// served.
func TestRLSAuthMTLS(t *testing.T) {
	rs := redistest.StartStandalone(t)
	files := redistest.NewTLSFiles(t)
	stranger := redistest.NewTLSFiles(t)
	path := rlsAuthConfig(t, rs.Addr, rlsPrefix(), fmt.Sprintf("  tls: {cert_file: %q, key_file: %q}\n  client_auth: {client_ca_file: %q}\n",
		files.ServerCert, files.ServerKey, files.CA))
	p, grpcAddr, httpAddr := startRLSAuth(t, "rls-mtls", path)

	strangerPair, err := tls.LoadX509KeyPair(stranger.ClientCert, stranger.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	noCert, otherCA := files.ClientConfig(), files.ClientConfig()
	noCert.Certificates, otherCA.Certificates = nil, []tls.Certificate{strangerPair}
	const body = `{"domain": "edge", "descriptors": [[{"key": "remote_address", "value": "198.51.100.8"}]], "dry_run": true}`
	call := func(c *tls.Config) (httpBody string, grpcErr, httpErr error) {
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(c)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, grpcErr = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx,
			&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{pbDescriptor("remote_address", "198.51.100.8")}})
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: c}, Timeout: 10 * time.Second}
		defer hc.CloseIdleConnections()
		resp, err := hc.Post("https://"+httpAddr+"/v1/check", "application/json", strings.NewReader(body))
		if err != nil {
			return "", grpcErr, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b), grpcErr, nil
	}
	for name, c := range map[string]*tls.Config{"no certificate": noCert, "another CA": otherCA} {
		hb, gerr, herr := call(c)
		if status.Code(gerr) != codes.Unavailable {
			t.Errorf("gRPC, %s: %v, want the handshake to fail (Unavailable)", name, gerr)
		}
		if herr == nil {
			t.Errorf("HTTP, %s: answered %s, want the handshake to fail", name, hb)
		}
		t.Logf("%s: gRPC %v; HTTP %v", name, gerr, herr)
	}
	hb, gerr, herr := call(files.ClientConfig())
	if gerr != nil || herr != nil || !strings.Contains(hb, `"remaining":9`) {
		t.Errorf("the CA's client certificate: gRPC %v; HTTP %v %s (want remaining 9: the refused handshakes spent nothing)", gerr, herr, hb)
	}
	got := rlsRefusals(t, p)
	for _, k := range []string{"grpc/no_certificate", "grpc/bad_certificate", "http/no_certificate", "http/bad_certificate"} {
		if got[k] == "" || got[k] == "0" {
			t.Errorf("quotagate_rls_unauthenticated_total %s = %q, want at least 1 (all: %v)", k, got[k], got)
		}
	}
}
