package rls

import (
	"fmt"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
)

// TestAllOrNothingAcrossSlots: descriptors that start with different
// entries live in different Redis hash slots (on a Cluster, on different
// primaries), and a request whose descriptor is over charges none of the
// others, wherever the over one stands in the request, on a standalone
// Redis and on a Cluster alike.
func TestAllOrNothingAcrossSlots(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	standalone := redistest.StartStandalone(t)
	for name, addrs := range map[string][]string{"standalone": {standalone.Addr}, "cluster": cluster.Addrs()} {
		t.Run(name, func(t *testing.T) {
			store := redisstore.Open(redisstore.Config{Addrs: addrs, Timeout: 10 * time.Second, FleetStatic: true})
			t.Cleanup(func() { store.Close() })
			e, _ := newTestEngine(t, Options{Store: store, Timeout: 10 * time.Second, KeyPrefix: redistest.KeyPrefix(t)})
			for _, overAt := range []int{0, 3} {
				addr := desc("remote_address", fmt.Sprint("192.0.2.", 90+overAt))  // 10 a minute
				plan := desc("plan", fmt.Sprint("p", overAt))                      // 1000 a day
				agent := desc("user_agent", fmt.Sprint("ua", overAt))              // 30 a minute
				login := desc("client", fmt.Sprint("c", overAt), "path", "/login") // 3 a minute
				ds := []Descriptor{addr, plan, agent}
				ds = append(ds[:overAt], append([]Descriptor{login}, ds[overAt:]...)...)
				for i := range 4 {
					r := decide(t, e, Request{Domain: "edge", Descriptors: ds})
					if want := map[bool]Code{true: OK, false: OverLimit}[i < 3]; r.Overall != want || r.Statuses[overAt].Code != want {
						t.Fatalf("login at %d, call %d: %+v, want %s", overAt, i+1, r, want)
					}
				}
				r := decide(t, e, Request{Domain: "edge", Descriptors: []Descriptor{addr, plan, agent}})
				for i, want := range []uint32{10 - 4, 1000 - 4, 30 - 4} {
					if got := r.Statuses[i].Remaining; got != want {
						t.Errorf("login at %d: descriptor %d has %d left, want %d (charged by the 3 allowed requests and this one only)", overAt, i, got, want)
					}
				}
			}
			if name == "cluster" {
				used := 0
				for _, n := range cluster.Nodes() {
					if n.MustDo(t, "DBSIZE") != int64(0) {
						used++
					}
				}
				if used < 2 {
					t.Errorf("the descriptors' keys are on %d primaries; the test needs them on several", used)
				}
			}
		})
	}
}
