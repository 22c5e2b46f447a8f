package gateway

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
)

// oneTokenPolicyConfig is today's LLM route: one token policy, a cost
// block settled from the response, compared with llmConfig's three
// policies (requests, tokens per model, money) in BenchmarkLLMDecision.
const oneTokenPolicyConfig = `
server: {listen: 127.0.0.1:0, admin_listen: 127.0.0.1:0}` + settleHead + `
  tpm: {limits: {"*": {rate: 100000000, per: 10s, burst: 100000000}}}
` + chatRoute + `
    policies: [tpm]
    cost: {reserve: 100, reserve_from: {json: max_tokens}, max: 32000, settle_from: {json: usage.total_tokens, sse: usage.total_tokens}}
`

// BenchmarkLLMDecision measures one admitted, settled chat request
// through the pipeline (to an upstream on loopback that reports a usage),
// on the memory store and on Redis: the route with one token policy
// against the route with three policies and two measures. On Redis it
// reports the script calls (round trips) a request costs, one decision
// and one settlement whatever the number of policies, and every Redis
// command, those the scripts run per key included (INFO commandstats).
func BenchmarkLLMDecision(b *testing.B) {
	three := strings.Replace(llmConfig, "rate: 50000, calendar", "rate: 9000000000000, calendar", 1)
	three = strings.NewReplacer("rate: 100, per: 100000s, burst: 100}", "rate: 100000000, per: 10s, burst: 100000000}",
		"rate: 100000, per: 10000s, burst: 100000}", "rate: 100000000, per: 10s, burst: 100000000}").Replace(three)
	for _, c := range []struct{ name, cfg, body string }{
		{"one_policy", oneTokenPolicyConfig, `{"model":"gpt-4o","max_tokens":500}`},
		{"three_policies", three, `{"model":"gpt-4o","max_tokens":500}`},
	} {
		for _, store := range []string{"memory", "redis"} {
			b.Run(c.name+"/"+store, func(b *testing.B) {
				var srv *redistest.Server
				var addrs []string
				if store == "redis" {
					srv = redistest.StartStandalone(b)
					addrs = []string{srv.Addr}
				}
				sf := newSettleFixtureWith(b, srv, addrs, c.cfg, time.Second)
				mode := "/v1/chat/json?u=300"
				if c.name == "three_policies" {
					mode = "/v1/chat/llm?p=100&c=200"
				}
				calls := func() commandCounts { return redisCalls(b, srv) }
				before := calls()
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					r := httptest.NewRequest("POST", mode, strings.NewReader(c.body))
					r.Header.Set("X-API-Key", "KEY1")
					r.Header.Set("Content-Type", "application/json")
					w := &discardWriter{h: http.Header{}}
					sf.gw.ServeHTTP(w, r)
					if w.code != http.StatusOK {
						b.Fatalf("status %d", w.code)
					}
					sf.gw.settling.Wait()
				}
				b.StopTimer()
				if srv != nil {
					after := calls()
					b.ReportMetric(float64(after.scripts-before.scripts)/float64(b.N), "round-trips/op")
					b.ReportMetric(float64(after.all-before.all-1)/float64(b.N), "redis-cmds/op") // less the INFO itself
				}
			})
		}
	}
}

// commandCounts are the commands a Redis server ran: the scripts called
// (FCALL, EVALSHA: one round trip each) and every command, the ones the
// scripts ran included (INFO commandstats counts both).
type commandCounts struct{ scripts, all int64 }

// redisCalls returns the commands srv has run; zero without a server.
func redisCalls(tb testing.TB, srv *redistest.Server) commandCounts {
	var n commandCounts
	if srv == nil {
		return n
	}
	v, err := srv.Do("INFO", "commandstats")
	if err != nil {
		tb.Fatal(err)
	}
	s, _ := v.(string)
	for line := range strings.SplitSeq(s, "\n") {
		name, rest, ok := strings.Cut(line, ":calls=")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		num, _, _ := strings.Cut(rest, ",")
		c, _ := strconv.ParseInt(num, 10, 64)
		n.all += c
		if name == "cmdstat_fcall" || name == "cmdstat_evalsha" || name == "cmdstat_fcall_ro" {
			n.scripts += c
		}
	}
	return n
}
