package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/lease"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/stack"
)

// leaseLoad is one paced run of a hot key over three instances.
type leaseLoad struct {
	rate, burst int64 // the key's bucket, per second
	demand      int64 // requests per second over the fleet
	// warm is sent first and not counted (but for the bound), then for_.
	warm, for_ time.Duration
}

// leaseRun is what a leaseLoad measured after its warm-up, and what the
// whole run admitted in elapsed.
type leaseRun struct {
	requests, admitted, scripts int64
	totalAdmitted               int64
	elapsed                     time.Duration
}

// runLeaseLoad sends ld.demand requests per second, paced (each of 4
// callers per instance keeps its own schedule and catches up when late),
// for ld.warm + ld.for_ to three instances, each a full stack.Stack (denial
// cache over leases over a RedisStore with its own client) deciding one
// key with lease; it counts the requests and the script calls on the
// server from the end of the warm-up, the unused units given back on
// Close included.
func runLeaseLoad(b *testing.B, srv *redistest.Server, key string, ld leaseLoad, spec ratelimit.Lease) leaseRun {
	const instances, callers = 3, 4
	stacks := make([]*stack.Stack, instances)
	for i := range stacks {
		r := redisstore.NewRedisStore(redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{srv.Addr}}),
			redisstore.RedisOptions{Timeout: 2 * time.Second})
		stacks[i] = stack.New(lease.New(r, lease.Options{}), stack.Options{})
	}
	it := tb(key, ld.rate, ld.burst, time.Second, 1)
	it.Lease = spec
	var requests, admitted, total atomic.Int64
	var s0 atomic.Int64
	interval := time.Duration(int64(time.Second) * instances * callers / ld.demand)
	start := time.Now()
	measured := start.Add(ld.warm)
	var wg sync.WaitGroup
	wg.Go(func() {
		time.Sleep(time.Until(measured))
		_, n, _ := commandCalls(b, srv)
		s0.Store(n)
	})
	for _, s := range stacks {
		for c := range callers {
			wg.Go(func() {
				next := start.Add(time.Duration(c) * interval / callers)
				for next.Before(measured.Add(ld.for_)) {
					if d := time.Until(next); d > 0 {
						time.Sleep(d)
					}
					next = next.Add(interval)
					d, err := s.Decide(context.Background(), []ratelimit.Item{it})
					if err != nil || d.Failure != nil {
						b.Errorf("Decide: %v %v", err, d.Failure)
						return
					}
					counted := !next.Add(-interval).Before(measured)
					if counted {
						requests.Add(1)
					}
					if d.Allowed {
						total.Add(1)
						if counted {
							admitted.Add(1)
						}
					}
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, s := range stacks {
		_ = s.Close()
	}
	_, s1, _ := commandCalls(b, srv)
	return leaseRun{requests: requests.Load(), admitted: admitted.Load(), scripts: s1 - s0.Load(),
		totalAdmitted: total.Load(), elapsed: elapsed}
}

// BenchmarkLeaseAutoVersusTuned compares `lease: auto` with hand-tuned
// leases (max_block 10 to 500, ttl 1s, instances 3) on one hot key over
// three instances, paced on real time and real Redis: under its limit
// (demand half the rate: every request must be admitted) and over it
// (demand twice the rate: admitted must not exceed burst + rate ×
// elapsed). After a warm-up of 1s (the leases' ramp, which auto pays with
// a few more calls: its first requests go to the store unleased), it
// reports script calls per request and admitted requests over 4s; run it
// with -benchtime=1x (each case is a fixed-length run).
func BenchmarkLeaseAutoVersusTuned(b *testing.B) {
	srv := redistest.StartStandalone(b)
	loads := []struct {
		name string
		ld   leaseLoad
	}{
		{"under", leaseLoad{rate: 3000, burst: 3000, demand: 1500, warm: time.Second, for_: 4 * time.Second}},
		{"over", leaseLoad{rate: 1500, burst: 1500, demand: 3000, warm: time.Second, for_: 4 * time.Second}},
	}
	leases := []struct {
		name  string
		lease ratelimit.Lease
	}{{"auto", ratelimit.Lease{Auto: true, TTL: time.Second, Instances: 3}}}
	for _, mb := range []int64{10, 25, 50, 100, 250, 500} {
		leases = append(leases, struct {
			name  string
			lease ratelimit.Lease
		}{fmt.Sprintf("max_block=%d", mb), ratelimit.Lease{MaxBlock: mb, TTL: time.Second, Instances: 3}})
	}
	var n atomic.Int64
	for _, load := range loads {
		for _, l := range leases {
			b.Run(load.name+"/"+l.name, func(b *testing.B) {
				key := fmt.Sprintf("%s{hot%d}:tenant", redistest.KeyPrefix(b), n.Add(1))
				run := runLeaseLoad(b, srv, key, load.ld, l.lease)
				bound := load.ld.burst + int64(float64(load.ld.rate)*run.elapsed.Seconds())
				if run.totalAdmitted > bound {
					b.Errorf("admitted %d, over the bound %d", run.totalAdmitted, bound)
				}
				if load.ld.demand < load.ld.rate && run.admitted != run.requests {
					b.Errorf("under the limit, %d of %d measured requests admitted", run.admitted, run.requests)
				}
				b.ReportMetric(float64(run.scripts)/float64(run.requests), "scripts/req")
				b.ReportMetric(float64(run.admitted), "admitted")
				b.ReportMetric(float64(run.requests), "requests")
				b.ReportMetric(float64(run.totalAdmitted), "total_admitted")
				b.ReportMetric(float64(bound), "bound")
			})
		}
	}
}
