package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
)

// TestFaultRedisPaused: Redis is frozen (SIGSTOP) for 2 s, then resumed.
// Connections stay open and commands hang, so every decision runs into the
// deadline until the breaker opens. Expectation: see runOutage.
func TestFaultRedisPaused(t *testing.T) {
	rs := redistest.StartStandalone(t)
	up := startUpstream(t)
	gw := startGateway(t, "gw", outageConfig(up.URL(), rs.Addr))
	runOutage(t, gw, outage{fault: "Redis paused (SIGSTOP) 2 s", inject: rs.Pause, heal: rs.Resume, storeFills: 1})
}

// TestFaultRedisSlowNetwork: the network to Redis adds 200 ms to every
// command (four times the deadline) for 2 s. Expectation: as for a paused
// Redis (runOutage).
func TestFaultRedisSlowNetwork(t *testing.T) {
	rs := redistest.StartStandalone(t)
	px := startTCPProxy(t, rs.Addr)
	up := startUpstream(t)
	gw := startGateway(t, "gw", outageConfig(up.URL(), px.Addr))
	runOutage(t, gw, outage{fault: "network to Redis +200 ms latency, 2 s",
		inject: func() { px.setDelay(200 * time.Millisecond) }, heal: px.heal, storeFills: 1})
}

// TestFaultRedisBlackholed: the network to Redis stops forwarding (packets
// vanish; connections stay open) for 2 s. Expectation: as for a paused
// Redis (runOutage).
func TestFaultRedisBlackholed(t *testing.T) {
	rs := redistest.StartStandalone(t)
	px := startTCPProxy(t, rs.Addr)
	up := startUpstream(t)
	gw := startGateway(t, "gw", outageConfig(up.URL(), px.Addr))
	runOutage(t, gw, outage{fault: "network to Redis black-holed 2 s", inject: px.blackhole, heal: px.heal, storeFills: 1})
}

// TestFaultRedisKilledAndRestarted: Redis is killed (SIGKILL) and, 2 s
// later, restarted empty on the same port. Connections are refused
// meanwhile. Expectation: as in runOutage, and the gateway recovers without
// a restart of its own: /readyz is 200 again and decisions are exact on the
// empty server.
func TestFaultRedisKilledAndRestarted(t *testing.T) {
	rs := redistest.StartStandalone(t)
	up := startUpstream(t)
	gw := startGateway(t, "gw", outageConfig(up.URL(), rs.Addr))
	runOutage(t, gw, outage{fault: "Redis killed, restarted empty after 2 s", inject: rs.Kill, heal: rs.Restart, storeFills: 2})
}

// TestFaultScriptFlush: FUNCTION FLUSH and SCRIPT FLUSH every 20 ms while
// two gateways take traffic on policies that fail closed. The gateways
// must load their function library again (or, where functions are
// unavailable, the script on NOSCRIPT) without failing a request: zero
// 5xx, zero unanswered,
// and the limit still holds exactly (a burst of 30 at 1 per hour admits
// exactly 30 units to the tenant that exhausts it).
func TestFaultScriptFlush(t *testing.T) {
	const burst = 30
	rs := redistest.StartStandalone(t)
	up := startUpstream(t)
	cfg := limiterConfig(up.URL(), []string{rs.Addr}, "acme", "tight")
	cfg.Tiers["tight"] = tierCfg{}
	cfg.addKey("key-tight-tenant", "tight-tenant", "tight")
	cfg.Policies["tenant"] = policyCfg{OnStoreError: "closed", Limits: map[string]limitCfg{
		"std":   bucket(100000, "1s", 100000),
		"tight": bucket(1, "1h", burst),
	}}
	cfg.route("items.get", "GET", "/ok/{rest...}", 1, "tenant")
	gws := startGateways(t, 2, cfg)

	// A server without functions (Redis 6, or FUNCTION renamed away)
	// refuses FUNCTION FLUSH: there only the scripts are flushed.
	_, errF := rs.Do("FUNCTION", "FLUSH")
	functions := errF == nil
	if !functions {
		t.Logf("FUNCTION FLUSH refused (%v): flushing scripts only", errF)
	}
	stop := make(chan struct{})
	var flushes int
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				var errF error
				if functions {
					_, errF = rs.Do("FUNCTION", "FLUSH")
				}
				_, errS := rs.Do("SCRIPT", "FLUSH")
				if errF == nil && errS == nil {
					flushes++
				}
			}
		}
	}()
	outs := load{workers: 16, duration: 2 * time.Second, pace: 2 * time.Millisecond, next: func(w, i int) call {
		c := call{label: "acme", base: roundRobin(gws, w, i).URL, path: "/ok/x", key: "key-acme"}
		if w%4 == 0 {
			c.label, c.key = "tight", "key-tight-tenant"
		}
		return c
	}}.run(t)
	close(stop)
	wg.Wait()

	s := summarize(outs, nil)
	tight := summarize(outs, byLabel("tight"))
	t.Logf("%d FUNCTION and SCRIPT FLUSHes: %s (tight tenant %s, %d admitted), worst %v", flushes, s.mix(), tight.mix(), tight.admitted, s.worst())
	failed := s.unanswered
	for code, n := range s.status {
		if code >= 500 {
			failed += n
		}
	}
	if failed > 0 || !s.only(200, 429) {
		t.Errorf("%d failed requests during FUNCTION and SCRIPT FLUSH (%s), want 0", failed, s.mix())
	}
	if tight.admitted != burst || tight.status[429] == 0 {
		t.Errorf("tight tenant: %s, admitted %d, want exactly %d and then 429", tight.mix(), tight.admitted, burst)
	}
	if flushes < 20 {
		t.Errorf("only %d FUNCTION and SCRIPT FLUSHes ran", flushes)
	}
	recordFault(t, faultRecord{
		Fault:      fmt.Sprintf("FUNCTION FLUSH and SCRIPT FLUSH every 20 ms (%d times) during traffic", flushes),
		Expect:     "zero failed requests; limit exact",
		Mix:        s.mix(),
		Worst:      s.worst(),
		Unanswered: s.unanswered,
		Over:       fmt.Sprintf("%d (tight tenant admitted %d of %d)", max(0, tight.admitted-burst), tight.admitted, burst),
	})
}

// TestBreakerStateGauge: while Redis is frozen and the breaker has opened,
// quotagate_store_breaker_state reports 2 (open), the value documented for
// an open breaker (0 closed, 1 half-open, 2 open).
func TestBreakerStateGauge(t *testing.T) {
	rs := redistest.StartStandalone(t)
	up := startUpstream(t)
	cfg := outageConfig(up.URL(), rs.Addr)
	// A long cooldown keeps the breaker open (not half-open) while we look.
	cfg.Store.Redis.BreakerCooldown = "30s"
	gw := startGateway(t, "gw", cfg)
	if v := gw.metric("quotagate_store_breaker_state"); v != 0 {
		t.Errorf("breaker state %v on a healthy store, want 0", v)
	}
	rs.Pause()
	// Five failed decisions open the breaker.
	client := newClient(1)
	for range 8 {
		do(client, call{base: gw.URL, path: "/open/x", key: "key-acme"}, false)
	}
	client.CloseIdleConnections()
	v := gw.metric("quotagate_store_breaker_state")
	rs.Resume()
	if v != 2 {
		t.Errorf("quotagate_store_breaker_state = %v with the breaker open, want 2 (open)", v)
	}
}
