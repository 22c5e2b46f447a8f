package rls

import (
	"context"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
)

// TestLimitOverridesIgnored: with rls.limit_overrides: ignore, a caller
// cannot raise its own limit by sending one with the descriptor (with
// allow, 4 billion a second replaces 10 a minute), nor make Redis keep a
// counter, for decades, for each value it sends under a key no descriptor
// file names; a malformed override is ignored too rather than failing the
// call (which Envoy may answer by applying no limit).
func TestLimitOverridesIgnored(t *testing.T) {
	srv := redistest.StartStandalone(t)
	store := redisstore.Open(redisstore.Config{Addrs: []string{srv.Addr}, Timeout: 2 * time.Second, FleetStatic: true})
	t.Cleanup(func() { store.Close() })
	raise := &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 4_000_000_000, Unit: typev3.RateLimitUnit_SECOND}
	addr := pbDesc("remote_address", "192.0.2.80") // 10 a minute
	addr.Limit = raise
	ctx := context.Background()

	cfg := config.Default()
	cfg.Store.Redis.KeyPrefix = redistest.KeyPrefix(t) + "allow"
	cfg.Store.Redis.Timeout = 10 * time.Second // a busy machine: a decision, not a deadline, is under test
	allow, _ := startServerOn(t, store, cfg)
	resp, err := allow.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{addr}})
	if err != nil || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != raise.RequestsPerUnit {
		t.Fatalf("allow: %v, %v, want the caller's limit", resp, err)
	}

	cfg = config.Default()
	cfg.Store.Redis.KeyPrefix = redistest.KeyPrefix(t) + "ignore"
	cfg.Store.Redis.Timeout = 10 * time.Second
	cfg.RLS.LimitOverrides = "ignore"
	client, _ := startServerOn(t, store, cfg)
	for i := range 11 {
		resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{addr}})
		if err != nil || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 10 {
			t.Fatalf("call %d: %v, %v, want the configured limit of 10", i+1, resp, err)
		}
		if want := map[bool]rlsv3.RateLimitResponse_Code{true: rlsv3.RateLimitResponse_OK, false: rlsv3.RateLimitResponse_OVER_LIMIT}[i < 10]; resp.OverallCode != want {
			t.Fatalf("call %d: %v, want %s", i+1, resp.OverallCode, want)
		}
	}

	before := srv.MustDo(t, "DBSIZE")
	var many []*commonv3.RateLimitDescriptor
	for i := range MaxDescriptors {
		d := pbDesc("not_configured", string(rune('A'+i)))
		d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_YEAR, UnitMultiplier: nil}
		many = append(many, d)
	}
	many[0].Limit.Unit = typev3.RateLimitUnit_UNKNOWN // malformed: no unit
	resp, err = client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: many})
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[1].CurrentLimit != nil {
		t.Fatalf("overrides on unconfigured keys: %v, %v, want OK without a limit", resp, err)
	}
	if after := srv.MustDo(t, "DBSIZE"); after != before {
		t.Errorf("Redis keys: %v before, %v after the overrides, want no new key", before, after)
	}
}
