package e2e

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
)

// chaosDecideScript stands for a decision: it reads and writes one hash
// and sets its expiry, as the decision scripts do per key.
const chaosDecideScript = `local v = redis.call('HINCRBY', KEYS[1], 'n', 1)
redis.call('PEXPIRE', KEYS[1], 60000)
return v`

// TestChaosWaitCost measures what a stronger mode for strict policies
// would add to each decision: WAIT 1 <timeout> after the decision's
// script, so that a decision is answered only once a replica holds it (a
// promotion of that replica then loses nothing acknowledged). On a
// primary with one replica on loopback it times the script alone and the
// script followed by WAIT 1 100 on the same connection, 1000 times each,
// and logs the medians and 99th percentiles. It asserts that WAIT saw the
// replica's acknowledgement nearly always (otherwise the figure would be
// the timeout's, not replication's).
func TestChaosWaitCost(t *testing.T) {
	cl := redistest.StartClusterWithReplicas(t, 1)
	p := cl.Nodes()[0]
	c, err := p.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 1000
	timeAll := func(wait bool) (p50, p99 time.Duration, acked int) {
		lat := make([]time.Duration, 0, n)
		for i := range n {
			key := "{w}:" + strconv.Itoa(i%50)
			start := time.Now()
			if _, err := c.Do("EVAL", chaosDecideScript, "1", key); err != nil {
				t.Fatalf("EVAL: %v", err)
			}
			if wait {
				v, err := c.Do("WAIT", "1", "100")
				if err != nil {
					t.Fatalf("WAIT: %v", err)
				}
				if k, _ := v.(int64); k >= 1 {
					acked++
				}
			}
			lat = append(lat, time.Since(start))
		}
		slices.Sort(lat)
		return lat[n/2], lat[n*99/100], acked
	}
	b50, b99, _ := timeAll(false)
	w50, w99, acked := timeAll(true)
	t.Logf("decision script alone: p50 %v p99 %v; with WAIT 1 100: p50 %v p99 %v (replica acknowledged %d of %d)",
		b50, b99, w50, w99, acked, n)
	if acked < n*9/10 {
		t.Errorf("WAIT 1 100 saw the replica's acknowledgement %d times of %d: the figures measure the timeout", acked, n)
	}
}
