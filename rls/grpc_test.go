package rls

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
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
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/memstore"
)

// startServer serves testdata's rules over real gRPC and HTTP listeners on
// free ports, deciding on an in-process store.
func startServer(t *testing.T, headers bool) (rlsv3.RateLimitServiceClient, *grpc.ClientConn, string) {
	t.Helper()
	return startServerWith(t, headers, nil)
}

// startServerWith is startServer serving TLS with files when they are not nil.
func startServerWith(t *testing.T, headers bool, files *redistest.TLSFiles) (rlsv3.RateLimitServiceClient, *grpc.ClientConn, string) {
	t.Helper()
	cfg := config.Default()
	creds, scheme := insecure.NewCredentials(), "http://"
	if files != nil {
		cfg.RLS.TLS = &config.TLS{CertFile: files.ServerCert, KeyFile: files.ServerKey}
		creds, scheme = credentials.NewTLS(files.ClientConfig()), "https://"
	}
	cfg.RLS.ResponseHeaders = headers
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { store.Close() })
	return serveConfig(t, cfg, store, creds, scheme)
}

// startServerOn is startServer deciding on store, with cfg's settings
// (its rls.config_files are testdata's). It returns the gRPC client and
// the HTTP check API's base URL.
func startServerOn(t *testing.T, store ratelimit.Store, cfg *config.Config) (rlsv3.RateLimitServiceClient, string) {
	t.Helper()
	client, _, base := serveConfig(t, cfg, store, insecure.NewCredentials(), "http://")
	return client, base
}

// serveConfig serves testdata's rules with cfg's rls section on store.
func serveConfig(t *testing.T, cfg *config.Config, store ratelimit.Store, creds credentials.TransportCredentials, scheme string) (rlsv3.RateLimitServiceClient, *grpc.ClientConn, string) {
	t.Helper()
	cfg.RLS.ConfigFiles = []string{"testdata/edge.yaml", "testdata/extensions.yaml", "testdata/databases.yaml"}
	cfg.RLS.ShutdownDelay = 0 // the cleanup's stop need not wait for health checkers
	srv, err := NewServer(cfg, ServerOptions{Store: store})
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
	conn, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn), conn, scheme + hl.Addr().String()
}

func pbDesc(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func TestGRPCShouldRateLimit(t *testing.T) {
	client, conn, _ := startServer(t, true)
	ctx := context.Background()

	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v, %v", h, err)
	}

	in := &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 4, Descriptors: []*commonv3.RateLimitDescriptor{
		pbDesc("remote_address", "192.0.2.1"), pbDesc("nothing", "x"), pbDesc("client", "c", "path", "/login"),
	}}
	in.Descriptors[2].HitsAddend = wrapperspb.UInt64(1)
	resp, err := client.ShouldRateLimit(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || len(resp.Statuses) != 3 {
		t.Fatalf("response %v", resp)
	}
	st := resp.Statuses[0]
	if st.Code != rlsv3.RateLimitResponse_OK || st.LimitRemaining != 6 || st.CurrentLimit.GetRequestsPerUnit() != 10 ||
		st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || st.DurationUntilReset.AsDuration() <= 0 || st.DurationUntilReset.AsDuration() > time.Minute {
		t.Errorf("status 0 = %v", st)
	}
	if resp.Statuses[1].CurrentLimit != nil || resp.Statuses[1].Code != rlsv3.RateLimitResponse_OK {
		t.Errorf("unmatched status = %v", resp.Statuses[1])
	}
	if resp.Statuses[2].LimitRemaining != 2 {
		t.Errorf("per-descriptor hits_addend: status 2 = %v", resp.Statuses[2])
	}
	headers := map[string]string{}
	for _, hv := range resp.ResponseHeadersToAdd {
		headers[hv.Key] = hv.Value
	}
	if headers["RateLimit-Policy"] != `"edge.client.path_/login";q=3;w=60` || !strings.HasPrefix(headers["RateLimit"], `"edge.client.path_/login";r=2;t=`) {
		t.Errorf("headers = %v", headers)
	}

	// Over the limit: the whole request is denied and nothing is charged.
	in.HitsAddend = 7
	resp, err = client.ShouldRateLimit(ctx, in)
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT ||
		resp.Statuses[2].Code != rlsv3.RateLimitResponse_OK || resp.Statuses[2].LimitRemaining != 2 {
		t.Fatalf("over: %v, %v", resp, err)
	}

	_, err = client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge"})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("no descriptors: %v, want InvalidArgument", err)
	}
}

func TestHTTPCheck(t *testing.T) {
	_, _, base := startServer(t, true)
	post := func(body string) (int, http.Header, map[string]any) {
		t.Helper()
		resp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("body %q: %v", b, err)
		}
		return resp.StatusCode, resp.Header, m
	}
	body := `{"domain": "db_calls", "descriptors": [[{"key": "database", "value": "accounts"}]], "hits": 400, "dry_run": true}`
	code, _, m := post(body)
	if code != 200 || m["overall"] != "OK" || m["dry_run"] != true {
		t.Fatalf("dry run: %d %v", code, m)
	}
	st := m["statuses"].([]any)[0].(map[string]any)
	if st["remaining"] != float64(500) {
		t.Fatalf("dry run consumed or misreported: %v", st)
	}
	code, hdr, m := post(strings.Replace(body, `"dry_run": true`, `"dry_run": false`, 1))
	st = m["statuses"].([]any)[0].(map[string]any)
	if code != 200 || m["overall"] != "OK" || st["remaining"] != float64(100) || hdr.Get("RateLimit-Policy") != `"db_calls.database_accounts";q=500;w=1` {
		t.Fatalf("check: %d %v %v", code, m, hdr)
	}
	limit := st["limit"].(map[string]any)
	if limit["unit"] != "second" || limit["requests_per_unit"] != float64(500) || limit["policy"] != "db_calls.database_accounts" {
		t.Errorf("limit = %v", limit)
	}
	for _, bad := range []string{`{`, `{"domain": "x", "descriptors": [[{"key": "a"}]], "extra": 1}`, `{"domain": "", "descriptors": [[{"key": "a"}]]}`, `{} {}`} {
		if code, _, m := post(bad); code != 400 || m["error"] != "bad_request" {
			t.Errorf("%s: %d %v, want 400", bad, code, m)
		}
	}
	resp, err := http.Get(base + "/v1/check")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Errorf("GET: %d, want 405", resp.StatusCode)
	}
	big := bytes.Repeat([]byte(" "), maxCheckBody+1)
	resp, err = http.Post(base+"/v1/check", "application/json", bytes.NewReader(append(big, '{', '}')))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Errorf("big body: %d, want 413", resp.StatusCode)
	}
}

func TestTLS(t *testing.T) {
	files := redistest.NewTLSFiles(t)
	client, _, base := startServerWith(t, false, files)
	resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
		Descriptors: []*commonv3.RateLimitDescriptor{pbDesc("remote_address", "192.0.2.1")}})
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("gRPC over TLS: %v, %v", resp, err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: files.ClientConfig()}}
	hr, err := hc.Post(base+"/v1/check", "application/json", strings.NewReader(`{"domain": "edge", "descriptors": [[{"key": "a", "value": "b"}]]}`))
	if err != nil {
		t.Fatal(err)
	}
	hr.Body.Close()
	if hr.StatusCode != 200 || hr.TLS == nil {
		t.Fatalf("HTTP over TLS: %d, TLS %v", hr.StatusCode, hr.TLS != nil)
	}
	// A plaintext client is refused.
	plain, err := http.Post("http"+strings.TrimPrefix(base, "https")+"/v1/check", "application/json", strings.NewReader(`{}`))
	if err == nil {
		plain.Body.Close()
		if plain.StatusCode == 200 {
			t.Fatal("plaintext HTTP was served")
		}
	}
}

// listeners opens a gRPC and an HTTP listener on free ports.
func listeners(t *testing.T) (grpcLn, httpLn net.Listener) {
	t.Helper()
	var ls [2]net.Listener
	for i := range ls {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls[i] = l
	}
	return ls[0], ls[1]
}

// TestOnlyDecisionAndHealthServed: the gRPC listener serves the rate
// limit service and health checking, nothing else: no reflection (which
// would list every method to any caller) and no channelz (which would show
// the addresses of every connected client); a call to either is
// UNIMPLEMENTED.
func TestOnlyDecisionAndHealthServed(t *testing.T) {
	_, conn, _ := startServer(t, false)
	for _, method := range []string{
		"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
		"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
		"/grpc.channelz.v1.Channelz/GetTopChannels",
	} {
		stream, err := conn.NewStream(context.Background(), &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
		if err == nil {
			// SendMsg may see io.EOF from a stream the server already
			// ended; RecvMsg has the status it ended with.
			_ = stream.SendMsg(&healthpb.HealthCheckRequest{})
			err = stream.RecvMsg(&healthpb.HealthCheckResponse{})
		}
		if status.Code(err) != codes.Unimplemented {
			t.Errorf("%s: %v, want Unimplemented", method, err)
		}
	}
	srv := newMemoryServer(t)
	var names []string
	for name := range srv.grpc.GetServiceInfo() {
		names = append(names, name)
	}
	slices.Sort(names)
	if want := []string{"envoy.service.ratelimit.v3.RateLimitService", "grpc.health.v1.Health"}; !slices.Equal(names, want) {
		t.Errorf("services %v, want %v", names, want)
	}
}

// newMemoryServer builds, without serving it, a Server of testdata's edge
// domain on an in-process store.
func newMemoryServer(t *testing.T) *Server {
	t.Helper()
	cfg := config.Default()
	cfg.RLS.ConfigFiles = []string{"testdata/edge.yaml"}
	cfg.RLS.ShutdownDelay = 0 // a stop need not wait for health checkers
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { store.Close() })
	srv, err := NewServer(cfg, ServerOptions{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}
