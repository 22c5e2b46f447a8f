package main

// The fleet mode with -regions R > 1 runs the seed's scenario across
// regions: the N instances are split over R regions (region k has a share
// of them proportional to R − k: 50/33/17 % for three), each region with a
// redis-server of its own that its instances decide on, and one global
// redis-server that owns the enterprise tenant's quota, which is shared
// across the regions (regions: {mode: leased}) and granted to each by its
// demand (package ratelimit/regional, as cmd/quotagate wires it). A free
// caller (and the abusive one) stays in one region, as a user near one
// region does; the enterprise tenant calls every instance alike, so its
// demand splits as the instances do.
//
// Before the measured part, the enterprise tenant sends to every region
// until each holds a grant (the owner grants nothing for one lease_ttl
// after it first hears from a region, see package regional): the run then
// measures the connected bound, burst + rate × elapsed for the fleet as a
// whole. A region that loses its grant during the run (its reports late
// on a busy machine) decides on its safe share, which the bound does not
// count; the decisions so made are reported.

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/regional"
)

// The cross-region settings of -regions: those of the docs' example, the
// defaults of store.global.
const (
	regionReportInterval = time.Second
	regionLeaseTTL       = 5 * time.Second
	regionSafeShare      = 0.2
	regionGlobalTimeout  = 300 * time.Millisecond
)

// FleetRegions is what a run with -regions measures besides a fleet run.
type FleetRegions struct {
	Regions   int   `json:"regions"`
	Instances []int `json:"instances_per_region"`
	// GlobalCalls is commands the global Redis ran per second (INFO
	// commandstats: the reports' scripts and what they run, the region's
	// PINGs and the script loads).
	GlobalCalls float64 `json:"global_calls_per_s"`
	// RegionalCalls is commands the regional Redis servers ran per
	// request, summed (decisions, the layer's counts and grants, the
	// reporters' locks and reads, the fleet roster).
	RegionalCalls float64 `json:"regional_calls_per_req"`
	// ReportBytes is the bytes the global Redis received and sent
	// (total_net_input_bytes + total_net_output_bytes) per region per
	// report interval.
	ReportBytes float64 `json:"report_bytes_per_interval"`
	// Warmup is how long it took until every region held a grant.
	Warmup float64 `json:"warmup_s"`
	// SafeDecisions is the cross-region items decided on a safe share
	// (no live grant, or a stale read of the grants) in the measured
	// part, summed over the instances.
	SafeDecisions uint64 `json:"safe_share_decisions"`
	// SafeBound is the partition bound of the enterprise tenant: the
	// connected bound plus, for every region, its safe share of it. It
	// applies instead of the connected bound when SafeDecisions > 0.
	SafeBound uint64 `json:"enterprise_partition_bound"`
}

// regionBed is the Redis of a run with regions: one standalone server per
// region, and the global one.
type regionBed struct {
	regional *redisNodes // node k is region k's
	global   *redisNodes
}

// regionName is the name of region k.
func regionName(k int) string { return "r" + strconv.Itoa(k) }

// regionSizes splits n instances over r regions, region k's share
// proportional to r − k, each at least 1.
func regionSizes(n, r int) []int {
	total := r * (r + 1) / 2
	sizes := make([]int, r)
	left := n
	for k := range r {
		sizes[k] = max(1, n*(r-k)/total)
		left -= sizes[k]
	}
	for k := 0; left > 0; k = (k + 1) % r { // what rounding left, from the largest
		sizes[k]++
		left--
	}
	for k := r - 1; left < 0; k-- { // n < r is refused by the flags
		if sizes[k] > 1 {
			sizes[k]--
			left++
		}
	}
	return sizes
}

// startRegionBed starts r regional servers and the global one.
func startRegionBed(ctx context.Context, ps *procs, dir string, r int) (*regionBed, error) {
	b := &regionBed{regional: &redisNodes{topology: fmt.Sprintf("%d regions", r)}}
	for k := range r {
		n, err := startNodes(ctx, ps, filepath.Join(dir, regionName(k)), topoStandalone)
		if err != nil {
			b.close()
			return nil, err
		}
		b.regional.addrs = append(b.regional.addrs, n.addrs...)
		b.regional.nodes = append(b.regional.nodes, n.nodes...)
		b.regional.version = n.version
	}
	g, err := startNodes(ctx, ps, filepath.Join(dir, "global"), topoStandalone)
	if err != nil {
		b.close()
		return nil, err
	}
	b.global = g
	return b, nil
}

func (b *regionBed) close() {
	b.regional.close()
	if b.global != nil {
		b.global.close()
	}
}

// regionOf returns, for a run with regions, the region of each instance
// and the instance picker of driveFleet: a free caller's region is its
// number modulo the regions (the abusive caller's region 0), and in it an
// instance is chosen uniformly; the enterprise tenant's instance is chosen
// uniformly among all.
func regionPicker(sizes []int) (region []int, pick func(*rand.Rand, keyClass, int) int) {
	first := make([]int, len(sizes))
	for k, s := range sizes {
		if k > 0 {
			first[k] = first[k-1] + sizes[k-1]
		}
		for range s {
			region = append(region, k)
		}
	}
	n := len(region)
	return region, func(r *rand.Rand, class keyClass, id int) int {
		switch class {
		case classEnterprise:
			return r.IntN(n)
		case classAbusive:
			return r.IntN(sizes[0])
		}
		k := id % len(sizes)
		return first[k] + r.IntN(sizes[k])
	}
}

// regionLayer returns the Wrap of an instance of region c.Region: the
// regional layer on clients of its own to the regional and the global
// Redis, as cmd/quotagate opens it, and in *layer the layer.
func regionWrap(c regionStore, id string, layer **regional.Layer, closers *[]io.Closer) func(ratelimit.Store) ratelimit.Store {
	return func(below ratelimit.Store) ratelimit.Store {
		rc := redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{c.regional}, PoolSize: 4,
			DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
		gc := redisstore.NewRedisClient(redisstore.RedisClientOptions{Addrs: []string{c.global}, PoolSize: 4,
			DialTimeout: regionGlobalTimeout, ReadTimeout: regionGlobalTimeout, WriteTimeout: regionGlobalTimeout})
		*closers = append(*closers, rc, gc)
		l := regional.New(below, regional.Options{Region: c.name, Regional: rc, Owner: regional.NewOwner(gc, regional.OwnerOptions{}),
			ReportInterval: regionReportInterval, LeaseTTL: regionLeaseTTL, Timeout: regionGlobalTimeout, ID: id})
		*layer = l
		return l
	}
}

// regionStore is where an instance of a region decides and reports.
type regionStore struct{ name, regional, global string }

// regionFleetConfig is the configuration of the instances of region k of
// a run with regions: fleetConfig's, on the region's Redis, with the
// enterprise tenant's limit in a policy of its own shared across regions.
func regionFleetConfig(bed *regionBed, k, instances int, lease string, entRate int) string {
	rs := regionStore{name: regionName(k), regional: bed.regional.addrs[k], global: bed.global.addrs[0]}
	return fleetConfigOf([]string{rs.regional}, instances, lease, entRate, &rs)
}

// waitGranted sends one enterprise request to the first instance of each
// region every 50 ms until every region's layer holds a live grant, at
// most 60 s.
func waitGranted(ctx context.Context, handlers []http.Handler, layers []*regional.Layer, region []int, regions int) (time.Duration, error) {
	start := time.Now()
	tokens := newTokenMaker()
	for {
		granted := make([]bool, regions)
		for i, l := range layers {
			for _, s := range l.KeyStats() {
				if !s.Grant.None() && s.Grant.Rate > 0 {
					granted[region[i]] = true
				}
			}
		}
		missing := 0
		for _, g := range granted {
			if !g {
				missing++
			}
		}
		if missing == 0 {
			return time.Since(start), nil
		}
		if time.Since(start) > 60*time.Second {
			return 0, fmt.Errorf("missed deadline: %d of %d regions hold no grant of the enterprise quota after 60 s", missing, regions)
		}
		seen := make([]bool, regions)
		for i, h := range handlers {
			if seen[region[i]] {
				continue
			}
			seen[region[i]] = true
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://fleet.bench"+requestURI, nil)
			req.Header.Set("Authorization", tokens.bearer(enterpriseID, "enterprise"))
			h.ServeHTTP(&discardWriter{h: http.Header{}}, req)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(50 * time.Millisecond): // the reporters' pace, not synchronization
		}
	}
}

// safeDecisions sums the layers' safe-share decisions.
func safeDecisions(layers []*regional.Layer) uint64 {
	var n uint64
	for _, l := range layers {
		n += l.Stats().SafeDecisions
	}
	return n
}

// writeRegionsTable writes the runs with regions as a second table.
func writeRegionsTable(w io.Writer, rep *FleetReport) {
	var rows []string
	for _, r := range rep.Runs {
		g := r.Regions
		if g == nil {
			continue
		}
		sizes := make([]string, len(g.Instances))
		for i, s := range g.Instances {
			sizes[i] = strconv.Itoa(s)
		}
		var ent FleetClass
		for _, c := range r.Classes {
			if c.Class == classNames[classEnterprise] {
				ent = c
			}
		}
		rows = append(rows, "| "+strings.Join([]string{
			strconv.Itoa(r.Instances), strings.Join(sizes, "/"), strconv.FormatUint(ent.Requests, 10),
			strconv.FormatUint(ent.Admitted, 10), strconv.FormatUint(ent.Bound, 10), strconv.FormatUint(ent.Over, 10),
			fmt.Sprintf("%.3f", float64(ent.Admitted)/float64(max(ent.Bound, 1))), fmt.Sprintf("%.3f", ent.Utilisation),
			strconv.FormatUint(g.SafeDecisions, 10), fmt.Sprintf("%.1f", g.GlobalCalls), fmt.Sprintf("%.2f", g.RegionalCalls),
			fmt.Sprintf("%.0f", g.ReportBytes), fmt.Sprintf("%.1f", g.Warmup), fmt.Sprintf("%.0f", r.RPS),
		}, " | ")+" |")
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "enterprise tenant, one quota across the regions:")
	fmt.Fprintln(w)
	cols := []string{"N", "instances per region", "requests", "admitted", "bound", "over", "admitted/bound", "util",
		"safe-share decisions", "global calls/s", "regional calls/req", "report bytes/interval/region", "warm-up s", "req/s"}
	fmt.Fprintln(w, "| "+strings.Join(cols, " | ")+" |")
	fmt.Fprintln(w, "|"+strings.Repeat("---|", len(cols)))
	for _, r := range rows {
		fmt.Fprintln(w, r)
	}
	fmt.Fprintln(w)
}
