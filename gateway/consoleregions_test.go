package gateway

import (
	"reflect"
	"testing"
	"time"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/regional"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/routes"
	"github.com/quotagate/quotagate/telemetry"
)

// regionsTestConfig is region eu with one cross-region policy (quota, 60
// a minute) and one of the region alone; the store is injected.
const regionsTestConfig = `
server: {listen: 127.0.0.1:0, admin_listen: 127.0.0.1:0}
store:
  kind: redis
  redis: {addrs: ["127.0.0.1:1"]}
  region: eu
  global: {redis: {addrs: ["127.0.0.1:2"]}}
identity: {anonymous: {tier: anonymous}}
tiers: {anonymous: {}}
policies:
  quota:
    regions: {mode: leased, safe_share: 0.25}
    limits: {"*": {rate: 60, per: 1m, burst: 60}}
  own:
    limits: {"*": {rate: 10, per: 1s, burst: 10}}
upstreams:
  app: {url: "http://127.0.0.1:1", timeout: 1s}
routes:
  - {name: items.get, method: GET, path: /items, upstream: app, policies: [quota, own]}
`

// fakeRegion is a regional layer that reports fixed stats.
type fakeRegion struct {
	ratelimit.Store
	stats regional.Stats
	keys  []regional.KeyStat
}

func (f *fakeRegion) Stats() regional.Stats        { return f.stats }
func (f *fakeRegion) KeyStats() []regional.KeyStat { return f.keys }
func (f *fakeRegion) LeaseTTL() time.Duration      { return 5 * time.Second }

// TestConsoleRegions: the console's regions object sums, per cross-region
// policy, the keys its pattern matches (rates per second from each key's
// per), takes demand and utilisation from the reporter's last report,
// leaves out policies of the region alone and keys of no policy, and
// says the region is partitioned past lease_ttl without word from the
// owner.
func TestConsoleRegions(t *testing.T) {
	cfg, err := config.Parse([]byte(regionsTestConfig), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakeRegion{}
	gw, err := New(cfg, Options{OpenStore: func(config.Store) (*stack.Stack, error) {
		return stack.New(nil, stack.Options{Wrap: func(top ratelimit.Store) ratelimit.Store { fake.Store = top; return fake }}), nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	p := gw.live.Load()
	pattern, err := routes.NewKeyPattern(cfg.Store.Redis.KeyPrefix, routes.ScopeTenant, "quota", "token_bucket", "items.get")
	if err != nil {
		t.Fatal(err)
	}
	key := func(s string) string { k, _ := pattern.Key(routes.NewSubjectID(s)); return k }
	perMinute := ratelimit.Limit{Rate: 60, Burst: 60, Per: time.Minute}
	fake.keys = []regional.KeyStat{
		{Key: key("a"), Limit: perMinute, Grant: regional.Grant{Rate: 30, Burst: 30, Expires: 1},
			Reported: true, Demand: 120, Admitted: 24, Granted: 30},
		{Key: key("b"), Limit: perMinute},                                        // decided lately, no grant
		{Key: "qg:{t:x}:gone:tb", Limit: perMinute, Reported: true, Demand: 600}, // of no policy
	}
	for _, c := range []struct {
		since time.Duration
		state string
	}{{-1, "never"}, {time.Second, "connected"}, {6 * time.Second, "partitioned"}} {
		fake.stats = regional.Stats{Region: "eu", Reporter: true, SinceReport: c.since, SafeDecisions: 7}
		r := p.consoleRegions()
		if r == nil || r.Region != "eu" || !r.Reporter || r.State != c.state || r.SafeDecisions != 7 {
			t.Fatalf("since report %v: %+v, want eu, reporter, %s, 7 safe decisions", c.since, r, c.state)
		}
		if len(r.Classes) != 1 {
			t.Fatalf("classes %+v, want quota alone", r.Classes)
		}
		q := r.Classes[0]
		if q.Policy != "quota" || q.SafeShare != 0.25 || q.Keys != 2 || q.Granted != 1 || q.GrantedRate != 0.5 {
			t.Errorf("quota: %+v, want safe share 0.25, 1 of 2 keys granted, 0.5/s", q)
		}
		if q.Demand == nil || *q.Demand != 2 || q.Admitted == nil || *q.Admitted != 0.4 || q.Utilisation == nil || *q.Utilisation != 0.8 {
			t.Errorf("quota: demand %v admitted %v utilisation %v, want 2/s, 0.4/s, 0.8", q.Demand, q.Admitted, q.Utilisation)
		}
	}
	// The metrics: the layer's totals as they are, and per cross-region
	// policy the console's figures (the reporter's demand, admitted and
	// granted rates, the keys holding a live grant) with the layer's
	// counters of the policy.
	fake.stats = regional.Stats{Region: "eu", Reporter: true, Demand: 12, Admitted: 0.4, Granted: 0.5,
		ReportLatency: 250 * time.Millisecond, Keys: 1, SinceReport: time.Second, SafeDecisions: 7,
		Policies: map[string]regional.PolicyCounts{"quota": {SafeDecisions: 5, LeaseExpiries: 2}, "gone": {SafeDecisions: 2}}}
	m, ok := p.regionMetrics()
	want := telemetry.RegionStats{Region: "eu", Reporter: true, Demand: 12, Admitted: 0.4, Granted: 0.5, ReportLatencySeconds: 0.25,
		Keys: 1, SinceReportSeconds: 1, SafeDecisions: 7, Policies: []telemetry.RegionPolicyStats{
			{Policy: "quota", Demand: 2, Admitted: 0.4, Granted: 0.5, Keys: 1, SafeDecisions: 5, LeaseExpiries: 2}}}
	if !ok || !reflect.DeepEqual(m, want) {
		t.Errorf("region metrics %+v %v, want %+v", m, ok, want)
	}
	// On an instance that is not the reporter: no demand, no utilisation.
	for i := range fake.keys {
		fake.keys[i].Reported = false
	}
	fake.stats.Reporter = false
	if q := p.consoleRegions().Classes[0]; q.Demand != nil || q.Utilisation != nil || q.GrantedRate != 0.5 {
		t.Errorf("not the reporter: %+v, want the grants and no demand", q)
	}
	m, _ = p.regionMetrics()
	if q := m.Policies[0]; q.Demand != 0 || q.Admitted != 0 || q.Granted != 0 || q.Keys != 1 || q.LeaseExpiries != 2 {
		t.Errorf("not the reporter: metrics of quota %+v, want no rates, 1 key granted, 2 lease expiries", q)
	}
}
