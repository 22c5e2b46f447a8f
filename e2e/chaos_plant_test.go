package e2e

import (
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
)

// TestChaosPlantedBuildFailsTheChecker: two tenants saturate the plant
// route (a token bucket of burst 2, 2 a second) for 4 s on one Redis, one
// through a gateway of the release build, one through a gateway of the
// planted build (go build -tags quotagate_plant), and the chaos checker
// reads what the upstream received. The planted key must be over its
// bound (one denial a second admitted); the release build's must not:
// the release build has the plant off.
func TestChaosPlantedBuildFailsTheChecker(t *testing.T) {
	rs := redistest.StartStandalone(t)
	up := startChaosUpstream(t)
	const release, planted = "rel", plantTenant
	cfg := chaosConfig(up.srv.URL, []string{rs.Addr}, []string{release, planted})
	gw := startGateway(t, "release", cfg)
	caller := &chaosCaller{client: newClient(8), plant: startPlantGateway(t, cfg)}
	caller.fleet = &chaosFleet{t: t, places: []*chaosInstance{{g: gw, url: gw.URL}}}

	var wg sync.WaitGroup
	end := time.Now().Add(4 * time.Second)
	for _, tn := range []string{release, planted} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := chaosReq{tenant: tn, route: plantRoute, path: "/" + plantRoute + "/x"}
			for n := 0; time.Now().Before(end); n++ {
				caller.send(q, n)
				time.Sleep(20 * time.Millisecond) // the caller's think time
			}
		}()
	}
	wg.Wait()
	in := chaosInput{Limits: chaosLimits, RangeOf: map[string]int{}, Admits: up.record(), Calls: caller.log(),
		Jitter: 250 * time.Millisecond, CancelSlack: 250 * time.Millisecond, Deadline: 3 * time.Second}
	rep := check(in)
	over := map[string]int64{}
	admitted := map[string]int64{}
	for _, k := range rep.Keys {
		if k.Route == plantRoute {
			over[k.Tenant], admitted[k.Tenant] = k.Over, k.Admitted
		}
	}
	t.Logf("admitted: release %d (over %d), planted %d (over %d); statuses %v", admitted[release], over[release], admitted[planted], over[planted], rep.Status)
	if admitted[release] == 0 || admitted[planted] == 0 {
		t.Fatalf("a key got nothing (release %d, planted %d): the test says nothing", admitted[release], admitted[planted])
	}
	if over[planted] == 0 {
		t.Errorf("the checker found no over-admission on the planted build's key")
	}
	if over[release] != 0 {
		t.Errorf("the release build's key is %d over its bound: the plant is on in the release build", over[release])
	}
	if rep.Unanswered > 0 || rep.Wrong > 0 {
		t.Errorf("%d unanswered, %d wrong (first %s %s)", rep.Unanswered, rep.Wrong, rep.FirstUnanswer, rep.FirstWrong)
	}
}
