package gateway

import (
	"strings"
	"testing"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/proxy"
	"github.com/quotagate/quotagate/ratelimit/stack"
)

// BenchmarkPipelineSlot is the admitted path of benchConfig's route with a
// concurrency policy added (max far above the requests in flight), against
// the same route without it: what taking, holding and releasing a slot adds
// per request on the memory store.
//
//	go test -run '^$' -bench PipelineSlot -benchmem ./gateway
func BenchmarkPipelineSlot(b *testing.B) {
	withSlot := func(text string) string {
		text = strings.Replace(text, "upstreams:", "  inflight: {algorithm: concurrency, limits: {\"*\": {max: 100000}}}\nupstreams:", 1)
		return strings.Replace(text, "policies: [tenant, transfers]", "policies: [tenant, transfers, inflight]", 1)
	}
	for _, c := range []struct {
		name string
		edit func(string) string
	}{{"rate_only", func(s string) string { return s }}, {"with_slot", withSlot}} {
		b.Run(c.name, func(b *testing.B) {
			text := c.edit(strings.Replace(benchConfig, "KEYS\n", "    - {key_sha256: "+sha256Hex("bench-key-0")+", tenant: t0, tier: free}\n", 1))
			cfg, err := config.Parse([]byte(text), testGetenv)
			if err != nil {
				b.Fatal(err)
			}
			gw, err := New(cfg, Options{Transport: proxy.NewTransport(proxy.TransportOptions{}),
				OpenStore: func(c config.Store) (*stack.Stack, error) {
					return stack.New(nil, stack.Options{FleetSize: c.FleetSize}), nil
				}})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = gw.Close() })
			benchAdmitted(b, gw)
		})
	}
}
