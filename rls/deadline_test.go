package rls

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/stack"
)

// TestCallerDeadlineIsNotAStoreFailure: callers whose grpc-timeout passes
// while Redis is slow get DEADLINE_EXCEEDED, and their calls do not count
// as store failures: the circuit breaker stays closed, so the next caller
// is decided by Redis rather than refused (UNAVAILABLE) for the breaker's
// cooldown. Before, the caller's deadline became the store call's, and a
// few impatient callers opened the breaker for every caller.
func TestCallerDeadlineIsNotAStoreFailure(t *testing.T) {
	srv := redistest.StartStandalone(t)
	store := redisstore.Open(redisstore.Config{Addrs: []string{srv.Addr}, Timeout: time.Minute,
		BreakerFailures: 2, BreakerCooldown: time.Hour, FleetStatic: true, KeyPrefix: redistest.KeyPrefix(t)})
	t.Cleanup(func() { store.Close() })
	cfg := config.Default()
	cfg.Store.Redis.Timeout = time.Minute
	client, _ := startServerOn(t, store, cfg)
	in := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{pbDesc("remote_address", "192.0.2.50")}}
	if _, err := client.ShouldRateLimit(context.Background(), in); err != nil {
		t.Fatalf("first call: %v", err)
	}

	srv.Pause() // Redis answers nothing until Resume
	for i := range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		_, err := client.ShouldRateLimit(ctx, in)
		cancel()
		if status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("call %d with a 20ms deadline on a frozen Redis: %v, want DeadlineExceeded", i, err)
		}
	}
	srv.Resume()

	if h := store.Health(); h.Breaker != stack.BreakerClosed {
		t.Errorf("breaker after callers' deadlines: %v, want closed", h.Breaker)
	}
	resp, err := client.ShouldRateLimit(context.Background(), in)
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("after Redis is back: %v, %v, want a decision by Redis", resp, err)
	}
}

// TestCallerGoneBeforeTheStore: a call whose context has already ended is
// not sent to the store at all, and its error is the context's, not
// ErrUnavailable.
func TestCallerGoneBeforeTheStore(t *testing.T) {
	e, _ := newTestEngine(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	addr := desc("remote_address", "192.0.2.51")
	if _, err := e.Decide(ctx, &Request{Domain: "edge", Descriptors: []Descriptor{addr}}); !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
		t.Errorf("cancelled call: %v, want context.Canceled", err)
	}
	if r := decide(t, e, Request{Domain: "edge", Descriptors: []Descriptor{addr}}); r.Statuses[0].Remaining != 9 {
		t.Errorf("after the cancelled call: %d left, want 9 (nothing charged)", r.Statuses[0].Remaining)
	}
}

// TestClosedWhileRedisIsDown: with on_store_error closed and Redis down,
// a descriptor is OVER_LIMIT until the store is tried again (the breaker's
// cooldown), not for its unit: a daily limit used to answer "reset in a
// day" (duration_until_reset, the RateLimit header's t=), telling clients
// to stay away for a day after a blip of Redis.
func TestClosedWhileRedisIsDown(t *testing.T) {
	client, base := startOnDeadRedis(t, "closed")
	in := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{pbDesc("plan", "silver")}} // 1000 a day
	// The failure, then the open breaker.
	for i := range 2 {
		resp, err := client.ShouldRateLimit(context.Background(), in)
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("call %d: %v, %v, want OVER_LIMIT", i+1, resp, err)
		}
		if got := resp.Statuses[0].DurationUntilReset.AsDuration(); got != 3*time.Second {
			t.Errorf("call %d: duration_until_reset %v, want the breaker's cooldown of 3s", i+1, got)
		}
		for _, h := range resp.ResponseHeadersToAdd {
			if h.Key == "RateLimit" && !strings.HasSuffix(h.Value, ";t=3") {
				t.Errorf("call %d: RateLimit: %s, want t=3", i+1, h.Value)
			}
		}
	}
	resp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(`{"domain": "edge", "descriptors": [[{"key": "plan", "value": "silver"}]]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"retry_after_ms":3000`) {
		t.Errorf("HTTP check: %d %s, want OVER_LIMIT with retry_after_ms 3000", resp.StatusCode, body)
	}
}

// TestUnavailableWhileRedisIsDown: with on_store_error unavailable and
// Redis down, gRPC answers UNAVAILABLE (Envoy's failure_mode_deny
// decides) and the HTTP API 503 with Retry-After the breaker's cooldown,
// when Redis is tried again.
func TestUnavailableWhileRedisIsDown(t *testing.T) {
	client, base := startOnDeadRedis(t, "unavailable")
	in := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{pbDesc("plan", "silver")}}
	if _, err := client.ShouldRateLimit(context.Background(), in); status.Code(err) != codes.Unavailable {
		t.Errorf("gRPC: %v, want Unavailable", err)
	}
	resp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(`{"domain": "edge", "descriptors": [[{"key": "plan", "value": "silver"}]]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "3" {
		t.Errorf("HTTP check: %d, Retry-After %q; want 503 with Retry-After 3", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

// startOnDeadRedis serves testdata's rules with rls.on_store_error mode
// and response headers on a Redis that it then kills, behind a breaker
// that opens at the first failure and has a cooldown of 3s.
func startOnDeadRedis(t *testing.T, mode string) (rlsv3.RateLimitServiceClient, string) {
	t.Helper()
	srv := redistest.StartStandalone(t)
	store := redisstore.Open(redisstore.Config{Addrs: []string{srv.Addr}, Timeout: 10 * time.Second,
		BreakerFailures: 1, BreakerCooldown: 3 * time.Second, FleetStatic: true, KeyPrefix: redistest.KeyPrefix(t)})
	t.Cleanup(func() { store.Close() })
	cfg := config.Default()
	cfg.Store.Redis.Timeout = 10 * time.Second
	cfg.Store.Redis.BreakerCooldown = 3 * time.Second
	cfg.RLS.OnStoreError = config.RLSErrorMode(mode)
	cfg.RLS.ResponseHeaders = true
	client, base := startServerOn(t, store, cfg)
	srv.Kill()
	return client, base
}
