package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/internal/redistest"
)

// The descriptor files in envoyproxy/ratelimit's format that the decision
// service tests load, unchanged.
var rlsFiles = []string{"../rls/testdata/edge.yaml", "../rls/testdata/databases.yaml", "../rls/testdata/extensions.yaml"}

// rlsProc is a quotagate process serving the decision service.
type rlsProc struct {
	*proctest.Proc
	GRPC, HTTP string
	Client     rlsv3.RateLimitServiceClient
	Conn       *grpc.ClientConn
}

// startRLS runs the binary with the decision service on rlsFiles,
// deciding on Redis at addr under prefix, with rls.on_store_error mode,
// and connects a gRPC client to it.
func startRLS(t *testing.T, name, addr, prefix, mode string) *rlsProc {
	t.Helper()
	return startRLSFiles(t, name, addr, prefix, mode, rlsFiles, "1s", "50ms")
}

// startRLSFiles is startRLS on the given descriptor files, watching the
// configuration every watch.
func startRLSFiles(t *testing.T, name, addr, prefix, mode string, descriptorFiles []string, watch, timeout string) *rlsProc {
	t.Helper()
	files, _ := json.Marshal(descriptorFiles)
	cfg := fmt.Sprintf(`server: {listen: "127.0.0.1:0", admin_listen: "127.0.0.1:0"}
store:
  kind: redis
  fleet_size: 2
  redis: {addrs: [%q], timeout: %s, key_prefix: %q}
identity: {anonymous: {tier: anonymous}}
tiers: {anonymous: {}}
upstreams: {app: {url: "echo:"}}
routes: [{name: app, method: GET, path: /, upstream: app}]
rls:
  listen: "127.0.0.1:0"
  http_listen: "127.0.0.1:0"
  config_files: %s
  on_store_error: %s
  response_headers: true
  shutdown_delay: 0s
`, addr, timeout, prefix, files, mode)
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p := proctest.Start(t, proctest.Binary(t), proctest.Options{Name: name, Args: []string{"-config", path, "-watch-interval", watch}})
	rp := &rlsProc{Proc: p}
	// The line is written before the gateway's addresses are known, but its
	// output may reach the test after them.
	if line, ok := p.Logs.WaitLine(`"msg":"rls started"`, proctest.StartTimeout); ok {
		var rec struct{ Msg, Listen, HTTP_Listen string }
		if json.Unmarshal([]byte(line), &rec) == nil {
			rp.GRPC, rp.HTTP = rec.Listen, rec.HTTP_Listen
		}
	}
	if rp.GRPC == "" || rp.HTTP == "" {
		t.Fatalf("%s: no \"rls started\" line with both addresses:\n%s", name, p.Logs.Tail(20))
	}
	conn, err := grpc.NewClient(rp.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	rp.Conn, rp.Client = conn, rlsv3.NewRateLimitServiceClient(conn)
	return rp
}

func rlsPrefix() string { return "rls" + strconv.FormatInt(time.Now().UnixNano(), 36) }

func pbDescriptor(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// redisMinute is the Redis server's current minute, which fixed windows of a
// minute follow.
func redisMinute(t *testing.T, rs *redistest.Server) int64 {
	t.Helper()
	v, err := rs.Do("TIME")
	if err != nil {
		t.Fatal(err)
	}
	parts, ok := v.([]any)
	if !ok || len(parts) != 2 {
		t.Fatalf("TIME = %v", v)
	}
	sec, err := strconv.ParseInt(fmt.Sprint(parts[0]), 10, 64)
	if err != nil {
		t.Fatalf("TIME = %v", v)
	}
	return sec / 60
}

// TestRLSFleetExactAdmission: two processes share Redis; 64 concurrent
// gRPC callers spread over both ask 3 times each for one client address
// limited to 10 per minute. Exactly 10 are OK, every other answer is
// OVER_LIMIT, none fails. A run that straddles a minute boundary (two
// windows) is retried with a fresh address.
func TestRLSFleetExactAdmission(t *testing.T) {
	rs := redistest.Shared(t)
	prefix := rlsPrefix()
	// The store's longest timeout: this test is about exactness, and a busy
	// machine must not turn answers into UNAVAILABLE.
	start := func(name string) *rlsProc {
		return startRLSFiles(t, name, rs.Addr, prefix, "unavailable", rlsFiles, "1s", "1s")
	}
	procs := []*rlsProc{start("rls-a"), start("rls-b")}
	const callers, each = 64, 3
	for attempt := range 3 {
		addr := fmt.Sprintf("198.51.100.%d", attempt+1)
		before := redisMinute(t, rs)
		var mu sync.Mutex
		counts := map[string]int{}
		var wg sync.WaitGroup
		for c := range callers {
			wg.Go(func() {
				p := procs[c%len(procs)]
				for range each {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					resp, err := p.Client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge",
						Descriptors: []*commonv3.RateLimitDescriptor{pbDescriptor("remote_address", addr)}})
					cancel()
					key := resp.GetOverallCode().String()
					if err != nil {
						key = "error: " + status.Code(err).String()
					}
					mu.Lock()
					counts[key]++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if redisMinute(t, rs) != before {
			t.Logf("attempt %d straddled a minute boundary (%v); retrying", attempt+1, counts)
			continue
		}
		if counts["OK"] != 10 || counts["OVER_LIMIT"] != callers*each-10 {
			t.Fatalf("answers %v; want exactly 10 OK and %d OVER_LIMIT", counts, callers*each-10)
		}
		return
	}
	t.Fatal("every attempt straddled a minute boundary")
}

// TestRLSDescriptorSemantics drives one process over gRPC and HTTP:
// nested descriptors, shadow mode, hits_addend, unknown descriptors and
// domains, health checking and the check API's dry run.
func TestRLSDescriptorSemantics(t *testing.T) {
	rs := redistest.Shared(t)
	p := startRLS(t, "rls", rs.Addr, rlsPrefix(), "unavailable")
	ctx := context.Background()
	ask := func(hits uint32, ds ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := p.Client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: hits, Descriptors: ds})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		return resp
	}

	h, err := healthpb.NewHealthClient(p.Conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v, %v", h, err)
	}

	// Nested: client → path /login is 3 per minute; another path 20 per
	// second; a deeper method POST 100 per hour.
	login := pbDescriptor("client", "c1", "path", "/login")
	for i := range 3 {
		if r := ask(0, login); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != uint32(2-i) {
			t.Fatalf("login %d: %v", i+1, r)
		}
	}
	r := ask(0, login)
	if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 3 {
		t.Fatalf("login 4: %v", r)
	}
	if r := ask(0, pbDescriptor("client", "c1", "path", "/x", "method", "POST")); r.Statuses[0].CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR {
		t.Fatalf("deepest level: %v", r)
	}

	// Shadow mode: over the limit, still OK.
	shadow := pbDescriptor("experiment", "new_quota")
	for i := range 4 {
		if r := ask(0, shadow); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].Code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("shadow %d: %v", i+1, r)
		}
	}

	// hits_addend is the cost, request-wide or per descriptor.
	addr := pbDescriptor("remote_address", "203.0.113.77")
	if r := ask(6, addr); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 4 {
		t.Fatalf("hits 6: %v", r)
	}
	addr.HitsAddend = wrapperspb.UInt64(5)
	if r := ask(1, addr); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].LimitRemaining != 4 {
		t.Fatalf("per-descriptor hits 5 with 4 left: %v", r)
	}

	// Unknown descriptors and domains are OK, without a limit.
	if r := ask(0, pbDescriptor("nobody", "knows")); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("unknown descriptor: %v", r)
	}
	if r, err := p.Client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "elsewhere", Descriptors: []*commonv3.RateLimitDescriptor{addr}}); err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("unknown domain: %v, %v", r, err)
	}

	// Decisions are counted by configured path; no client value appears.
	resp, err := http.Get(p.AdminURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`quotagate_decisions_total{policy="edge.client.path_/login",result="allowed",stage="rls"} 3`,
		`quotagate_decisions_total{policy="edge.client.path_/login",result="denied",stage="rls"} 1`,
		`quotagate_decisions_total{policy="edge.experiment_new_quota",result="shadow_denied",stage="rls"} 2`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, raw := range []string{"203.0.113.77", "c1", "/x"} {
		if strings.Contains(string(metrics), raw) {
			t.Errorf("/metrics holds the client value %q", raw)
		}
	}

	// The HTTP check API on the same engine: a dry run reports without
	// consuming.
	body := `{"domain": "db_calls", "descriptors": [[{"key": "database", "value": "accounts"}]], "hits": 500, "dry_run": true}`
	for range 2 {
		code, out := postJSON(t, "http://"+p.HTTP+"/v1/check", body)
		if code != 200 || out["overall"] != "OK" {
			t.Fatalf("dry run: %d %v", code, out)
		}
	}
	code, out := postJSON(t, "http://"+p.HTTP+"/v1/check", strings.Replace(body, `"hits": 500`, `"hits": 501`, 1))
	if code != 200 || out["overall"] != "OVER_LIMIT" {
		t.Fatalf("dry run over the limit: %d %v", code, out)
	}
}

// TestRLSFrozenRedis: with Redis stopped (SIGSTOP), each on_store_error
// mode answers within the deadline: unavailable as gRPC UNAVAILABLE, open
// as OK, closed as OVER_LIMIT, local from this instance's share.
func TestRLSFrozenRedis(t *testing.T) {
	rs := redistest.StartStandalone(t)
	prefix := rlsPrefix()
	modes := []struct {
		mode string
		want string
	}{
		{"unavailable", "error: Unavailable"},
		{"open", "OK"},
		{"closed", "OVER_LIMIT"},
		{"local", "OK"},
	}
	procs := make([]*rlsProc, len(modes))
	for i, m := range modes {
		procs[i] = startRLS(t, "rls-"+m.mode, rs.Addr, prefix, m.mode)
	}
	rs.Pause()
	defer rs.Resume()
	const bound = 2 * time.Second // the store's 50ms timeout, with room for a busy machine
	for i, m := range modes {
		for n := range 3 {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			start := time.Now()
			resp, err := procs[i].Client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge",
				Descriptors: []*commonv3.RateLimitDescriptor{pbDescriptor("remote_address", "192.0.2.200")}})
			took := time.Since(start)
			cancel()
			got := resp.GetOverallCode().String()
			if err != nil {
				got = "error: " + status.Code(err).String()
			}
			if got != m.want {
				t.Errorf("%s, call %d: %s (%v); want %s", m.mode, n+1, got, err, m.want)
			}
			if took > bound {
				proctest.Overrun(t, "%s, call %d: answered in %v, bound %v (%s)", m.mode, n+1, took, bound, proctest.LoadAverage())
			}
		}
	}
	for i, m := range modes {
		if procs[i].Logs.Count("rls: store failed; applying on_store_error") == 0 {
			t.Errorf("%s: no store-failure warning logged", m.mode)
		}
	}
}

// postJSON posts body and decodes the JSON answer.
func postJSON(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	return resp.StatusCode, out
}

// TestRLSHotReload: a change to a descriptor file takes effect without a
// restart; a broken file is rejected and the live rules stay.
func TestRLSHotReload(t *testing.T) {
	rs := redistest.Shared(t)
	file := filepath.Join(t.TempDir(), "reload.yaml")
	write := func(body string) {
		t.Helper()
		tmp := file + ".tmp" // replaced atomically, as editors and ConfigMaps do
		if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write("domain: reload\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	p := startRLSFiles(t, "rls-reload", rs.Addr, rlsPrefix(), "unavailable", []string{file}, "50ms", "1s")
	limit := func() uint32 {
		t.Helper()
		resp, err := p.Client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "reload",
			HitsAddend: 0, Descriptors: []*commonv3.RateLimitDescriptor{pbDescriptor("k", "v")}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	if got := limit(); got != 5 {
		t.Fatalf("limit %d, want 5", got)
	}
	waitLimit := func(want uint32) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for limit() != want {
			if time.Now().After(deadline) {
				proctest.FatalOverrun(t, "the limit did not become %d within 20s (%s)", want, proctest.LoadAverage())
			}
			time.Sleep(20 * time.Millisecond) // polling a process, no clock to inject
		}
	}
	write("domain: reload\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 7}\n")
	waitLimit(7)

	// A broken file is rejected: the process logs why and keeps 7.
	write("domain: reload\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 9, burts: 1}\n")
	deadline := time.Now().Add(20 * time.Second)
	for p.Logs.Count("rls reload rejected") == 0 {
		if time.Now().After(deadline) {
			proctest.FatalOverrun(t, "no rejected reload logged within 20s (%s)", proctest.LoadAverage())
		}
		select {
		case <-p.Logs.Changed():
		case <-time.After(time.Until(deadline)):
		}
	}
	if !strings.Contains(p.Logs.String(), "burts: unknown key") {
		t.Errorf("the rejection does not name the key:\n%s", p.Logs.Tail(5))
	}
	if got := limit(); got != 7 {
		t.Fatalf("after a broken file the limit is %d, want the live 7", got)
	}
}
