package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/internal/redistest"
)

// TestQuotaReadsFromRotatingAddresses is issue 28's finding 4 against the
// real binary and a real Redis: 300 routes under a tenant_route policy (so
// one read of an anonymous caller is 300 keys), reads of /_quota from a
// new IPv6 /64 each (through a trusted proxy's X-Forwarded-For), so that
// no per-caller bound ever refuses one, while another tenant, whose
// policy is on_store_error: closed, keeps sending requests. The read
// budget is server.quota_reads {rate: 2, burst: 10, max_items: 100}, set
// through the environment.
//
// First Redis is frozen (SIGSTOP) for 4 reads, one more than the
// breaker's 3 failures: each is 503, none opens the breaker, and the
// other tenant's first request once Redis is back is 200 (each read used
// to count as a failed decision: the breaker opened, and that request was
// 503). Then 1,500 reads flood the gateway from 8 connections. Expected,
// exactly or within stated bounds, whatever the machine's speed:
//   - the reads admitted (200) number at most 10 - 4 + 2 × the seconds
//     since the first read (the budget), and at least the 6 left of its
//     burst; every other read is 429 (counted with reason budget, as many
//     as there were) and makes no store call: Redis ran at most one script
//     call per admitted read and per request of the other tenant;
//   - each admitted read carries 100 of the caller's 300 keys and says
//     "truncated": true;
//   - the other tenant's requests during the flood are all 200 (no 503);
//   - the breaker never opened: quotagate_store_errors_total stays 0 (a
//     decision's breaker opens only after failed decisions, each counted
//     there), its state is 0 at every scrape, and no read was refused by
//     it.
func TestQuotaReadsFromRotatingAddresses(t *testing.T) {
	const (
		routes    = 300
		maxItems  = 100
		readRate  = 2
		readBurst = 10
		frozen    = 4
		flood     = 1500
		workers   = 8
	)
	rs := redistest.StartStandalone(t)
	up := startUpstream(t)
	cfg := baseConfig(up.URL()).useRedis("500ms", rs.Addr)
	cfg.Store.Redis.BreakerFailures = 3
	cfg.Store.Redis.BreakerCooldown = "1m"
	cfg.Store.Fleet = &fleetCfg{Static: true} // no heartbeats: every store call is a read or a decision
	cfg.Server.TrustedProxies = []string{"127.0.0.1/32"}
	cfg.Identity.Anonymous = &anonCfg{Tier: "anon", IPv6Prefix: 64}
	cfg.Tiers["anon"] = tierCfg{Local: &limitCfg{Rate: 10, Per: "1s", Burst: 10}}
	cfg.Tiers["paid"] = tierCfg{}
	cfg.addKey("key-b", "tenant-b", "paid")
	cfg.Policies["per_route"] = policyCfg{Scope: "tenant_route", Limits: map[string]limitCfg{"anon": bucket(100, "1s", 100)}}
	cfg.Policies["b_closed"] = policyCfg{OnStoreError: "closed", Limits: map[string]limitCfg{"paid": bucket(1_000_000, "1s", 1_000_000)}}
	for i := range routes {
		cfg.route(fmt.Sprintf("r%03d", i), "GET", fmt.Sprintf("/r%03d/{rest...}", i), 1, "per_route", "b_closed")
	}
	gw := startGateway(t, "gw", cfg,
		withEnv(fmt.Sprintf("QUOTAGATE_SERVER_QUOTA_READS_RATE=%d", readRate)),
		withEnv(fmt.Sprintf("QUOTAGATE_SERVER_QUOTA_READS_BURST=%d", readBurst)),
		withEnv(fmt.Sprintf("QUOTAGATE_SERVER_QUOTA_READS_MAX_ITEMS=%d", maxItems)))

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers + 2}}
	var caller atomic.Int64
	// read reads /_quota as a new anonymous caller: the next /64.
	read := func() (int, []byte) {
		n := caller.Add(1)
		req, _ := http.NewRequest("GET", gw.URL+"/_quota", nil)
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("2001:db8:%x:%x::1", n>>16, n&0xffff))
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("read: %v", err)
			return 0, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	tenantB := func() int {
		req, _ := http.NewRequest("GET", gw.URL+"/r000/x", nil)
		req.Header.Set("X-API-Key", "key-b")
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("tenant b: %v", err)
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := tenantB(); c != http.StatusOK {
		proctest.FatalOverrun(t, "tenant b on a live Redis: %d", c)
	}

	// Frozen Redis: reads fail, the breaker stays closed.
	firstRead := time.Now()
	rs.Pause()
	for i := range frozen {
		if c, b := read(); c != http.StatusServiceUnavailable {
			t.Fatalf("read %d on a frozen Redis: %d %s, want 503", i, c, truncate(string(b), 200))
		}
	}
	rs.Resume()
	if c := tenantB(); c != http.StatusOK {
		if gw.metric("quotagate_store_errors_total", "kind=breaker_open") > 0 {
			t.Fatalf("tenant b after %d failed reads: %d, refused by the breaker the reads opened", frozen, c)
		}
		proctest.FatalOverrun(t, "tenant b after Resume: %d (Redis did not answer within 500ms)", c)
	}

	// The flood, with tenant b and a scraper of the breaker's state
	// running alongside.
	before := scriptCalls(t, rs)
	done := make(chan struct{})
	var side sync.WaitGroup
	var bOK, bOther atomic.Int64
	var worstBreaker atomic.Int64
	side.Add(2)
	go func() {
		defer side.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if c := tenantB(); c == http.StatusOK {
				bOK.Add(1)
			} else {
				bOther.Add(1)
				t.Errorf("tenant b during the flood: %d", c)
			}
		}
	}()
	go func() {
		defer side.Done()
		for {
			if s := gw.metric("quotagate_store_breaker_state"); int64(s) > worstBreaker.Load() {
				worstBreaker.Store(int64(s))
			}
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond): // polling an external process
			}
		}
	}()
	var ok, limited, other atomic.Int64
	var next atomic.Int64
	var work sync.WaitGroup
	for range workers {
		work.Add(1)
		go func() {
			defer work.Done()
			for next.Add(1) <= flood {
				c, b := read()
				switch c {
				case http.StatusOK:
					ok.Add(1)
					var rep struct {
						Policies  []json.RawMessage `json:"policies"`
						Truncated bool              `json:"truncated"`
					}
					if err := json.Unmarshal(b, &rep); err != nil || len(rep.Policies) != maxItems || !rep.Truncated {
						t.Errorf("admitted read: %d policies, truncated %v (%v), want %d and true", len(rep.Policies), rep.Truncated, err, maxItems)
					}
				case http.StatusTooManyRequests:
					limited.Add(1)
				default:
					other.Add(1)
					t.Errorf("read during the flood: %d %s", c, truncate(string(b), 200))
				}
			}
		}()
	}
	work.Wait()
	elapsed := time.Since(firstRead)
	// One more request of tenant b after the flood, so that its side ran
	// at least once while or after the reads were answered.
	close(done)
	side.Wait()
	if c := tenantB(); c == http.StatusOK {
		bOK.Add(1)
	} else {
		t.Errorf("tenant b after the flood: %d", c)
	}
	calls := scriptCalls(t, rs) - before

	admitted := ok.Load()
	bound := readBurst - frozen + int64(math.Ceil(readRate*elapsed.Seconds()))
	t.Logf("%d reads: %d admitted, %d refused (budget bound %d over %v); tenant b %d ok; %d script calls",
		flood, admitted, limited.Load(), bound, elapsed.Round(time.Millisecond), bOK.Load(), calls)
	if admitted > bound || admitted < readBurst-frozen {
		t.Errorf("admitted reads %d, want %d to %d (the budget over %v)", admitted, readBurst-frozen, bound, elapsed)
	}
	if admitted+limited.Load() != flood || other.Load() != 0 {
		t.Errorf("reads: %d admitted + %d refused + %d other, want %d", admitted, limited.Load(), other.Load(), flood)
	}
	if got := gw.metric("quotagate_quota_reads_refused_total", "reason=budget"); got != float64(limited.Load()) {
		t.Errorf("refused reads counted for budget: %v, want %d", got, limited.Load())
	}
	for _, r := range []string{"caller", "tier", "breaker_open"} {
		if got := gw.metric("quotagate_quota_reads_refused_total", "reason="+r); got != 0 {
			t.Errorf("refused reads counted for %s: %v, want 0 (every caller is new, the breaker closed)", r, got)
		}
	}
	if got := gw.metric("quotagate_quota_reads_refused_total", "reason=store_error"); got != frozen {
		t.Errorf("failed reads: %v, want the %d on the frozen Redis", got, frozen)
	}
	if calls > admitted+bOK.Load()+bOther.Load() {
		t.Errorf("%d script calls for %d admitted reads and %d requests of tenant b: refused reads reached Redis",
			calls, admitted, bOK.Load()+bOther.Load())
	}
	if bOK.Load() < 2 || bOther.Load() != 0 {
		t.Errorf("tenant b: %d ok, %d not, want all ok", bOK.Load(), bOther.Load())
	}
	if w := worstBreaker.Load(); w != 0 || gw.metric("quotagate_store_breaker_state") != 0 {
		t.Errorf("breaker state reached %d during the flood, want 0 (closed) throughout", w)
	}
	if got := gw.metric("quotagate_store_errors_total"); got != 0 {
		t.Errorf("quotagate_store_errors_total = %v, want 0: no decision failed, so the breaker never opened", got)
	}
}
