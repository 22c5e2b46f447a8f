package rls_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/internal/benchloop"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/rls"
)

// benchTenants is the number of distinct descriptor values decisions are
// spread over.
const benchTenants = 1000

// benchFile is a domain with one per-value limit that never denies: every
// decision is one admitted EVALSHA, as in the store benchmarks.
const benchFile = `domain: bench
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 1000000}
`

// BenchmarkGRPCDecide measures admitted ShouldRateLimit calls over real
// gRPC (loopback TCP, one client connection) to a server deciding on a
// local redis-server, at 1, 16 and 64 concurrent callers; "engine" runs the
// same decisions through Engine.Decide without gRPC. It reports
// decisions/s, latency percentiles and the CPU time per decision of this
// process, which holds both the gRPC client and the server (redis-server
// runs in its own).
func BenchmarkGRPCDecide(b *testing.B) {
	srv := redistest.StartStandalone(b)
	path := filepath.Join(b.TempDir(), "bench.yaml")
	if err := os.WriteFile(path, []byte(benchFile), 0o600); err != nil {
		b.Fatal(err)
	}
	cfg := config.Default()
	cfg.Store.Redis.Timeout = time.Second // measure Redis, not the fallback
	cfg.Store.Redis.KeyPrefix = "bench" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cfg.RLS.ConfigFiles = []string{path}
	cfg.RLS.ShutdownDelay = 0 // the cleanup's stop need not wait for health checkers
	store := redisstore.NewRedisStore(redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{srv.Addr}}),
		redisstore.RedisOptions{Timeout: time.Second})
	b.Cleanup(func() { store.Close() })
	s, err := rls.NewServer(cfg, rls.ServerOptions{Store: store})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln, nil, time.Second) }()
	b.Cleanup(func() { cancel(); <-done })
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	client := rlsv3.NewRateLimitServiceClient(conn)

	requests := make([]*rlsv3.RateLimitRequest, benchTenants)
	engineReqs := make([]rls.Request, benchTenants)
	for i := range requests {
		v := "t" + strconv.Itoa(i)
		requests[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{
			{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: v}}}}}
		engineReqs[i] = rls.Request{Domain: "bench", Descriptors: []rls.Descriptor{{Entries: []rls.Entry{{Key: "tenant", Value: v}}}}}
	}
	calls := map[string]func(i int) error{
		"grpc": func(i int) error {
			resp, err := client.ShouldRateLimit(context.Background(), requests[i])
			if err == nil && resp.OverallCode != rlsv3.RateLimitResponse_OK {
				err = fmt.Errorf("overall %v", resp.OverallCode)
			}
			return err
		},
		"engine": func(i int) error {
			req := engineReqs[i]
			resp, err := s.Engine().Decide(context.Background(), &req)
			if err == nil && resp.Overall != rls.OK {
				err = fmt.Errorf("overall %v", resp.Overall)
			}
			return err
		},
	}
	for _, mode := range []string{"grpc", "engine"} {
		for _, conc := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("%s/conc=%d", mode, conc), func(b *testing.B) { benchCalls(b, calls[mode], conc) })
		}
	}
}

// benchCalls runs b.N calls over conc callers.
func benchCalls(b *testing.B, call func(i int) error, conc int) {
	for i := range 100 { // warm up connections and the script cache
		if err := call(i % benchTenants); err != nil {
			b.Fatal(err)
		}
	}
	benchloop.Run(b, conc, "cpu-µs/op", func(seq int) error { return call(seq % benchTenants) })
}
