package e2e

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/internal/redistest"
)

// maxPeakRSS bounds the gateway's peak resident memory under a hostile
// store: far below the 32 GiB one hostile reply declares.
const maxPeakRSS = 256 << 20

// storeFallback drives 6 paced workers over /open, /closed and /local of
// outageConfig for d against a gateway whose store never answers a
// decision, and asserts what on_store_error promises: open 200 only,
// closed 503 only, local exactly this instance's share (localBurst over a
// fleet of 2) and then 429, every request answered.
func storeFallback(t *testing.T, gw *gateway, d time.Duration) (all summary, by map[string]summary) {
	t.Helper()
	routes := []string{"open", "closed", "local"}
	outs := load{workers: 6, duration: d, pace: 5 * time.Millisecond, next: func(w, i int) call {
		r := routes[(w+i)%len(routes)]
		return call{label: r, base: gw.URL, path: "/" + r + "/x", key: "key-acme"}
	}}.run(t)
	all, by = summarize(outs, nil), map[string]summary{}
	for _, r := range routes {
		by[r] = summarize(outs, byLabel(r))
	}
	if all.unanswered > 0 {
		t.Errorf("%d requests unanswered (first: %v)", all.unanswered, all.firstErr)
	}
	if s := by["open"]; !s.only(200) || s.n == 0 {
		t.Errorf("fail-open route: %s, want 200 only", s.mix())
	}
	if s := by["closed"]; !s.only(503) || s.n == 0 {
		t.Errorf("fail-closed route: %s, want 503 only", s.mix())
	}
	// A busy machine may send too few requests in d to use up the share:
	// then nothing is denied yet.
	switch s := by["local"]; {
	case !s.only(200, 429) || s.admitted > localShare || s.status[429] > 0 && s.admitted != localShare:
		t.Errorf("fail-local route: %s, %d admitted, want exactly the share %d then 429", s.mix(), s.admitted, localShare)
	case s.status[429] == 0:
		proctest.Overrun(t, "fail-local route: only %d requests in %v, too few to use up the share %d", s.n, d, localShare)
	}
	return all, by
}

// warmStore sends requests on /closed of outageConfig (a policy that fails
// closed, with a limit far above any test's load) until one is answered
// 200, so that the store's first connection is open and its first
// decision, which loads the function library, is made. A store that does
// not decide within timeout fails t: as a missed deadline when its calls
// timed out, as a wrong answer otherwise.
func warmStore(t *testing.T, gw *gateway, timeout time.Duration) {
	t.Helper()
	client := newClient(1)
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(timeout)
	var last outcome
	for time.Now().Before(deadline) {
		if last = do(client, call{base: gw.URL, path: "/closed/warm", key: "key-after"}, false); last.status == 200 {
			return
		}
		time.Sleep(50 * time.Millisecond) // polling another process
	}
	if gw.metric("quotagate_store_errors_total", "kind=timeout") > 0 {
		proctest.FatalOverrun(t, "no decision of the store within %v (last: %d %v): its calls passed their deadline", timeout, last.status, last.err)
	}
	t.Fatalf("no decision of the store within %v (last: %d %v %s)", timeout, last.status, last.err, last.body)
}

// storeErrorLine returns the gateway's ERROR line of its store check at
// start, failing t unless there is exactly one and it names want.
func storeErrorLine(t *testing.T, gw *gateway, want string) {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(gw.logs.String(), "\n") {
		if strings.Contains(l, `"level":"ERROR"`) && strings.Contains(l, "store unreachable") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], want) ||
		!strings.Contains(lines[0], `"fail_closed":["p_closed","p_exact"]`) || !strings.Contains(lines[0], `"fail_local":["p_local"]`) {
		t.Errorf("store ERROR lines at start: %q, want one naming %q and the policies by on_store_error", lines, want)
	}
}

// TestFaultRedisHostileEndpoint: a TCP server in place of Redis answers
// every command (the connection's HELLO, PING, the decision scripts) with
// a reply declaring 2^31-2 elements, which a client allocating by the
// declaration would take 32 GiB for. The gateway must refuse the reply
// before allocating it, serve by on_store_error, name the cause at start,
// and keep its peak resident memory under maxPeakRSS.
func TestFaultRedisHostileEndpoint(t *testing.T) {
	h := redistest.StartHostile(t, []byte("*2147483646\r\n"), "HELLO", "PING", "EVALSHA", "EVAL")
	up := startUpstream(t)
	cfg := outageConfig(up.URL(), h.Addr)
	cfg.Store.Redis.BreakerFailures = 1000000 // every decision meets the hostile reply
	gw := launchGateway(t, "gw", cfg)
	storeErrorLine(t, gw, "not a bounded Redis reply")
	all, by := storeFallback(t, gw, 1500*time.Millisecond)

	peak, err := proctest.PeakRSS(gw.proc.Cmd.Process.Pid)
	if err != nil && !errors.Is(err, proctest.ErrNoRSS) {
		t.Fatal(err)
	}
	if peak > maxPeakRSS {
		t.Errorf("peak resident memory %d MiB, want under %d MiB", peak>>20, maxPeakRSS>>20)
	}
	if h.Answered.Load() < int64(all.n/3) {
		t.Errorf("the hostile endpoint answered %d times for %d requests: the decisions did not reach it", h.Answered.Load(), all.n)
	}
	recordFault(t, faultRecord{
		Fault:  fmt.Sprintf("hostile endpoint in place of Redis: every reply declares 2^31-2 elements (%d replies)", h.Answered.Load()),
		Expect: "refused before allocation; open→200, closed→503, local→share of 10; ERROR line names the cause; peak RSS under 256 MiB",
		Mix: fmt.Sprintf("open %s; closed %s; local %s; peak RSS %d MiB",
			by["open"].mix(), by["closed"].mix(), by["local"].mix(), peak>>20),
		Worst:      all.worst(),
		Unanswered: all.unanswered,
		Over:       fmt.Sprintf("closed 0; local %d (the share, by design); open: %d allowed unchecked (by design)", by["local"].admitted, by["open"].admitted),
	})
}

// TestFaultRedisTLS: Redis speaks only TLS and requires a client
// certificate. A gateway with store.redis.tls set decides exactly through
// it; a gateway that trusts another CA cannot connect, names TLS in its
// ERROR line, and serves by on_store_error.
func TestFaultRedisTLS(t *testing.T) {
	files := redistest.NewTLSFiles(t)
	rs := redistest.StartStandaloneWith(t, redistest.Options{TLS: files})
	up := startUpstream(t)

	good := outageConfig(up.URL(), rs.Addr)
	good.Store.Redis.TLS = &tlsCfg{Enabled: true, CAFile: files.CA, CertFile: files.ClientCert, KeyFile: files.ClientKey}
	// Exactness is asserted here, not latency: a deadline that also covers
	// the TLS handshakes of new connections on a busy machine.
	good.Store.Redis.Timeout = "1s"
	gw := startGateway(t, "gw-tls", good)
	warmStore(t, gw, 10*time.Second)
	timeouts := gw.metric("quotagate_store_errors_total", "kind=timeout")
	outs := load{workers: 4, perWorker: 5, next: func(w, i int) call {
		return call{label: "exact", base: gw.URL, path: "/exact/x", key: "key-acme"}
	}}.run(t)
	exact := summarize(outs, nil)
	// p_exact fails closed: a decision past the deadline (a TLS handshake
	// of a new connection on a busy machine) is a 503, which is the
	// contract, and leaves fewer than the burst admitted.
	switch {
	case !exact.only(200, 429, 503) || exact.admitted > exactBurst:
		t.Errorf("over TLS: %s, %d admitted, want exactly %d then 429", exact.mix(), exact.admitted, exactBurst)
	case exact.status[503] > 0 && gw.metric("quotagate_store_errors_total", "kind=timeout") > timeouts:
		proctest.Overrun(t, "over TLS: %s, %d admitted: store calls passed their %s deadline", exact.mix(), exact.admitted, good.Store.Redis.Timeout)
	case exact.admitted != exactBurst || exact.status[503] > 0:
		t.Errorf("over TLS: %s, %d admitted, want exactly %d then 429", exact.mix(), exact.admitted, exactBurst)
	}
	recordFault(t, faultRecord{
		Fault:      "Redis reachable only over TLS with a client certificate (store.redis.tls set)",
		Expect:     "decisions exact through TLS: a burst of 5 admits 5 of 20 concurrent requests",
		Mix:        exact.mix(),
		Worst:      exact.worst(),
		Unanswered: exact.unanswered,
		Over:       fmt.Sprintf("%d (admitted %d of %d)", max(0, exact.admitted-exactBurst), exact.admitted, exactBurst),
	})

	bad := outageConfig(up.URL(), rs.Addr)
	bad.Store.Redis.TLS = &tlsCfg{Enabled: true, CAFile: files.OtherCA, CertFile: files.ClientCert, KeyFile: files.ClientKey}
	gwBad := launchGateway(t, "gw-untrusted", bad)
	storeErrorLine(t, gwBad, "TLS handshake failed")
	all, by := storeFallback(t, gwBad, time.Second)
	recordFault(t, faultRecord{
		Fault:      "TLS to Redis fails: the gateway trusts another CA than the one that signed the server",
		Expect:     "ERROR line names the TLS handshake; open→200, closed→503, local→share of 10",
		Mix:        fmt.Sprintf("open %s; closed %s; local %s", by["open"].mix(), by["closed"].mix(), by["local"].mix()),
		Worst:      all.worst(),
		Unanswered: all.unanswered,
		Over:       fmt.Sprintf("closed 0; local %d (the share, by design); open: %d allowed unchecked (by design)", by["local"].admitted, by["open"].admitted),
	})
}
