package main

// The fleet mode (-mode fleet) answers what a fleet of N gateways costs
// and whether it keeps every caller's limit exactly, at a million callers.
//
// The N instances run in this process, each built by gateway.New with
// the store the binary opens (redisstore.Open: its own client, lease
// store, denial cache, breaker and fleet registration), its own
// telemetry and stage 1. In-process instances let 50 of them run on a
// small machine, and calling their handlers directly keeps the load
// generator cheap (generatorCost measures it: a few µs per request)
// while every part of the gateway a request passes through, from JWT
// verification to the upstream proxy, runs as in the binary; only the
// HTTP server and its sockets are left out.
//
// Correctness is judged per caller: the hard bound of a token bucket
// that starts full (burst + rate × elapsed) must never be exceeded, and
// an exact token bucket run on the same requests' send times says what
// the fleet should have admitted. Store calls are counted twice: per
// class of caller in each instance's client (a go-redis hook), and in
// total by Redis (INFO commandstats), which the test checks agree.

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/ratelimit/regional"
	"github.com/quotagate/quotagate/telemetry"
)

// fleetOptions are the settings of -mode fleet.
type fleetOptions struct {
	sizes      []int    // instances per run (-n)
	topologies []string // standalone, cluster (-topology)
	mix        fleetMix
	lease      string
	// enterpriseRate is the enterprise tenant's limit per second (and
	// its burst).
	enterpriseRate int
	// redisAddr and clusterAddrs, when set, are a Redis the caller runs
	// instead of one the bench starts. It is flushed before each run.
	redisAddr    string
	clusterAddrs []string
	// logPath, when set, receives the instances' operational logs.
	logPath string
	// regions, above 1, splits the instances over that many regions (see
	// fleet_regions.go).
	regions int
}

// FleetClass is one class of callers in one fleet run.
type FleetClass struct {
	Class    string `json:"class"`
	Keys     uint64 `json:"keys"` // callers of the class that sent a request
	Requests uint64 `json:"requests"`
	Admitted uint64 `json:"admitted"`
	Limited  uint64 `json:"status_429"`
	// Errors is answers other than 200 and 429 (503 when the store failed:
	// the policy fails closed).
	Errors uint64 `json:"errors"`
	// Bound is the most the limit lets the class's callers admit in the
	// run: per caller burst + rate × elapsed, summed.
	Bound uint64 `json:"bound"`
	// Exact is what an exact token bucket per caller admits of the same
	// requests at the instants they were sent, summed.
	Exact uint64 `json:"exact"`
	// Over is, per caller, admissions beyond its bound, summed; 0 for a
	// strict limiter.
	Over uint64 `json:"over_admitted"`
	// Utilisation is Admitted / Exact: below 1, the fleet admitted less
	// than an exact limiter would have (decisions are made a little after
	// sending, so it can also exceed 1 slightly without over-admitting).
	Utilisation float64 `json:"utilisation"`
	// StoreCalls is script calls sent to Redis for this class's keys per
	// request of the class (counted in each instance's client).
	StoreCalls float64 `json:"store_calls_per_req"`
}

// FleetRun is one fleet size on one topology.
type FleetRun struct {
	Topology  string  `json:"topology"`
	Instances int     `json:"instances"`
	Seconds   float64 `json:"seconds"`
	Requests  uint64  `json:"requests"`
	RPS       float64 `json:"rps"`
	// From INFO deltas, summed over the Redis nodes, per request: every
	// command (those scripts run included) and top-level script calls.
	RedisCmds    float64 `json:"redis_cmds_per_req"`
	RedisScripts float64 `json:"redis_scripts_per_req"`
	// RedisCPUus is used_cpu_sys + used_cpu_user per request, µs.
	RedisCPUus float64 `json:"redis_cpu_us_per_req"`
	// RedisBytesPerKey is the mean MEMORY USAGE of live keys sampled at
	// the end of the measured part (see redisNodes.bytesPerKey);
	// RedisMBPer1M is that for 1,000,000 live callers (one key each), in
	// MB of 10^6 bytes: the same number as RedisBytesPerKey.
	RedisBytesPerKey float64 `json:"redis_bytes_per_key"`
	RedisMBPer1M     float64 `json:"redis_mb_per_1m_callers"`
	// GatewayMiB is the live heap (after GC) the instances added, divided
	// by their number.
	GatewayMiB float64 `json:"gateway_heap_mib_per_instance"`
	// ProcessCPUus is this process's CPU per request: the instances and
	// the load generator together; GenCPUus is the load generator's part,
	// measured alone before the run (see generatorCost).
	ProcessCPUus float64 `json:"process_cpu_us_per_req"`
	GenCPUus     float64 `json:"loadgen_cpu_us_per_req"`
	// OtherCalls is commands the instances sent that touch no caller's
	// keys (PING, CLUSTER SLOTS), in the whole run.
	OtherCalls uint64 `json:"other_store_calls"`
	// Errors counts the answers other than 200 and 429 by status and
	// problem type ("503 limiter_unavailable": the store missed its
	// deadline or its breaker was open, and the policy failed closed).
	Errors  map[string]uint64 `json:"errors,omitempty"`
	Classes []FleetClass      `json:"classes"`
	// Regions is set for a run with -regions.
	Regions *FleetRegions `json:"regions,omitempty"`
}

// FleetReport is the output of -mode fleet.
type FleetReport struct {
	Command  string            `json:"command"`
	Machine  map[string]string `json:"machine"`
	Settings map[string]string `json:"settings"`
	Notes    []string          `json:"notes"`
	Runs     []FleetRun        `json:"runs"`
}

// fleetBench runs every topology at every size and returns the report.
func fleetBench(ctx context.Context, o *options, command string, progress io.Writer) (*FleetReport, error) {
	dir, err := os.MkdirTemp("", "quotagate-bench-fleet-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ps := &procs{}
	defer ps.stopAll()
	f := &o.fleet
	rep := &FleetReport{
		Command: command,
		Machine: map[string]string{
			"cores": strconv.Itoa(runtime.NumCPU()), "os": runtime.GOOS + "/" + runtime.GOARCH,
			"go": runtime.Version(), "load": "loadavg at start " + loadAvg(),
		},
		Settings: map[string]string{
			"workers": strconv.Itoa(o.conns), "duration": o.duration.String(),
			"callers": strconv.Itoa(f.mix.callers), "lease": f.lease,
			"mix": fmt.Sprintf("enterprise %.0f%%, abusive %.0f%%, the rest Zipf(1.1) over the free callers",
				100*f.mix.enterpriseShare, 100*f.mix.abusiveShare),
			"limits": fmt.Sprintf("free %d/s burst %d (abusive too), enterprise %d/s burst %d; token bucket, on_store_error closed",
				freeRate, freeBurst, f.enterpriseRate, f.enterpriseRate),
		},
	}
	keys := newPerKey(f.mix.callers, f.enterpriseRate)
	ops := io.Discard
	if f.logPath != "" {
		file, err := os.Create(f.logPath)
		if err != nil {
			return nil, fmt.Errorf("-instance-log: %w", err)
		}
		w := telemetry.NewLogSink(file, telemetry.DefaultLogLines)
		defer file.Close()
		defer w.Close() // first: flushes into the file
		ops = w
	}
	if f.regions > 1 {
		rep.Settings["regions"] = fmt.Sprintf("%d (instances split %s), the enterprise limit one quota across them: regions: {mode: leased, safe_share: %g}, report_interval %s, lease_ttl %s",
			f.regions, "in proportion to R − k", regionSafeShare, regionReportInterval, regionLeaseTTL)
		fmt.Fprintf(progress, "starting redis (%d regions and the global owner)\n", f.regions)
		bed, err := startRegionBed(ctx, ps, dir, f.regions)
		if err != nil {
			return nil, err
		}
		defer bed.close()
		rep.Machine["redis"] = bed.regional.version
		for _, n := range f.sizes {
			fmt.Fprintf(progress, "%d regions: %d instances for %v\n", f.regions, n, o.duration)
			run, err := fleetRun(ctx, o, bed.regional, n, keys, ops, bed)
			if err != nil {
				return nil, fmt.Errorf("%d regions, %d instances: %w", f.regions, n, err)
			}
			rep.Runs = append(rep.Runs, *run)
		}
	}
	for _, topo := range f.topologies {
		if f.regions > 1 {
			break
		}
		var nodes *redisNodes
		switch {
		case topo == topoStandalone && f.redisAddr != "":
			nodes, err = connectNodes(ctx, topo, []string{f.redisAddr})
		case topo == topoCluster && len(f.clusterAddrs) > 0:
			nodes, err = connectNodes(ctx, topo, f.clusterAddrs)
		default:
			fmt.Fprintf(progress, "starting redis (%s)\n", topo)
			nodes, err = startNodes(ctx, ps, dir, topo)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", topo, err)
		}
		rep.Machine["redis"] = nodes.version
		for _, n := range f.sizes {
			fmt.Fprintf(progress, "%s: %d instances for %v\n", topo, n, o.duration)
			run, err := fleetRun(ctx, o, nodes, n, keys, ops, nil)
			if err != nil {
				nodes.close()
				return nil, fmt.Errorf("%s, %d instances: %w", topo, n, err)
			}
			for _, c := range run.Classes {
				fmt.Fprintf(progress, "  %-10s requests %d admitted %d (exact %d, bound %d, over %d) util %.3f store calls/req %.3f\n",
					c.Class, c.Requests, c.Admitted, c.Exact, c.Bound, c.Over, c.Utilisation, c.StoreCalls)
			}
			rep.Runs = append(rep.Runs, *run)
		}
		nodes.close()
	}
	rep.Machine["load"] += ", at end " + loadAvg()
	rep.Notes = fleetNotes(runtime.NumCPU())
	if f.regions > 1 {
		rep.Notes = append(rep.Notes, "regions: a free caller (and the abusive one, region 0) calls the instances of one region, its number modulo the regions; "+
			"the enterprise tenant calls every instance alike, so its demand splits as the instances do; its bound is the connected one, "+
			"burst + rate × elapsed for all regions together, measured after every region holds a grant (warm-up s); "+
			"safe-share decisions: enterprise items decided on a safe share (no live grant, or a read of the grants staler than half an interval), "+
			"which the partition bound covers; global calls/s: INFO commandstats of the global redis-server; regional calls/req: of the regional ones, per request; "+
			"report bytes: total_net_input_bytes + total_net_output_bytes of the global redis-server per region per report interval")
	}
	for _, r := range rep.Runs {
		if len(r.Errors) > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("errors, %s with %d instances: %s (-instance-log FILE keeps the instances' store errors)",
				r.Topology, r.Instances, formatCounts(r.Errors)))
		}
	}
	return rep, nil
}

// fleetRun starts n instances on nodes, drives them for o.duration and
// measures. With bed, nodes are its regional servers and the instances
// are split over the regions (see fleet_regions.go).
func fleetRun(ctx context.Context, o *options, nodes *redisNodes, n int, keys *perKey, ops io.Writer, bed *regionBed) (*FleetRun, error) {
	f := &o.fleet
	if err := nodes.flush(ctx); err != nil {
		return nil, err
	}
	cfgs := []string{fleetConfig(nodes.addrs, n, f.lease, f.enterpriseRate)}
	region := make([]int, n) // of each instance
	var pick func(*rand.Rand, keyClass, int) int
	var sizes []int
	if bed != nil {
		if err := bed.global.flush(ctx); err != nil {
			return nil, err
		}
		sizes = regionSizes(n, f.regions)
		region, pick = regionPicker(sizes)
		cfgs = cfgs[:0]
		for k, size := range sizes {
			cfgs = append(cfgs, regionFleetConfig(bed, k, size, f.lease, f.enterpriseRate))
		}
	}
	gen, err := generatorCost(ctx, f.mix, o.conns, keys)
	if err != nil {
		return nil, err
	}
	keys.reset()
	parsed := make([]*config.Config, len(cfgs))
	for k, text := range cfgs {
		if parsed[k], err = config.Parse([]byte(text), fleetGetenv); err != nil {
			return nil, fmt.Errorf("fleet config: %w", err)
		}
	}
	heapBefore := liveHeap()
	tags := classTags()
	instances := make([]*instance, 0, n)
	defer func() {
		for _, in := range instances {
			in.close()
		}
	}()
	handlers := make([]http.Handler, n)
	for i := range n {
		in, err := startInstance(ctx, parsed[region[i]], i, tags, ops)
		if err != nil {
			return nil, fmt.Errorf("instance %d: %w", i, err)
		}
		instances = append(instances, in)
		handlers[i] = in.gw
	}
	// Each instance connects, loads the script and (Cluster) learns the
	// slots with a caller of its own, outside the measured part.
	tokens := newTokenMaker()
	for i, h := range handlers {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://fleet.bench"+requestURI, nil)
		req.Header.Set("Authorization", tokens.bearer("warmup-"+strconv.Itoa(i), "free"))
		rw := &discardWriter{h: http.Header{}}
		h.ServeHTTP(rw, req)
		if rw.code != http.StatusOK {
			return nil, fmt.Errorf("instance %d: warm-up request answered %d", i, rw.code)
		}
	}
	var regions *FleetRegions
	var layers []*regional.Layer
	var gBefore redisStats
	var safeBefore uint64
	if bed != nil {
		for _, in := range instances {
			layers = append(layers, in.layer)
		}
		took, err := waitGranted(ctx, handlers, layers, region, f.regions)
		if err != nil {
			return nil, err
		}
		regions = &FleetRegions{Regions: f.regions, Instances: sizes, Warmup: round1(took.Seconds())}
		if gBefore, err = bed.global.stats(ctx); err != nil {
			return nil, err
		}
		safeBefore = safeDecisions(layers)
	}
	var before [numClasses + 1]uint64
	for _, in := range instances {
		for c := range before {
			before[c] += in.calls.calls[c].Load()
		}
	}
	rBefore, err := nodes.stats(ctx)
	if err != nil {
		return nil, err
	}
	cpuBefore, err := selfTicks()
	if err != nil {
		return nil, err
	}
	load := driveFleet(ctx, handlers, f.mix, o.conns, o.duration, keys, pick)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var gAfter redisStats
	if bed != nil {
		regions.SafeDecisions = safeDecisions(layers) - safeBefore
		if gAfter, err = bed.global.stats(ctx); err != nil {
			return nil, err
		}
	}
	cpuAfter, err := selfTicks()
	if err != nil {
		return nil, err
	}
	rAfter, err := nodes.stats(ctx)
	if err != nil {
		return nil, err
	}
	// At once: the keys of callers who stopped expire within seconds.
	bpk, err := nodes.bytesPerKey(ctx, 200)
	if err != nil {
		return nil, err
	}
	var calls [numClasses + 1]uint64
	for _, in := range instances {
		for c := range calls {
			calls[c] += in.calls.calls[c].Load()
		}
	}
	for c := range calls {
		calls[c] -= before[c]
	}
	heapAfter := liveHeap()

	run := &FleetRun{Topology: nodes.topology, Instances: n, Seconds: round2(load.elapsed.Seconds()),
		OtherCalls: calls[classOther], Errors: load.errors}
	for _, c := range load.classes {
		run.Requests += c.requests
	}
	if run.Requests == 0 {
		return nil, fmt.Errorf("no request completed")
	}
	perReq := func(v float64) float64 { return v / float64(run.Requests) }
	run.RPS = round1(float64(run.Requests) / load.elapsed.Seconds())
	all, scripts := rAfter.cmds.delta(rBefore.cmds)
	run.RedisCmds, run.RedisScripts = round2(perReq(float64(all))), round2(perReq(float64(scripts)))
	run.RedisCPUus = round2(perReq(1e6 * (rAfter.cpuSeconds - rBefore.cpuSeconds)))
	if bpk > 0 {
		run.RedisBytesPerKey = round1(bpk)
		run.RedisMBPer1M = round1(bpk * 1e6 / 1e6)
	}
	run.GatewayMiB = round2(float64(heapAfter-heapBefore) / float64(n) / (1 << 20))
	run.ProcessCPUus = round2(perReq(ticksToMicros(cpuAfter - cpuBefore)))
	run.GenCPUus = round2(gen)
	run.Classes = classRows(load, keys, calls)
	if regions != nil {
		secs := load.elapsed.Seconds()
		gAll, _ := gAfter.cmds.delta(gBefore.cmds)
		regions.GlobalCalls = round1(float64(gAll) / secs)
		regions.RegionalCalls = run.RedisCmds
		intervals := secs / regionReportInterval.Seconds()
		regions.ReportBytes = round1(float64(gAfter.netBytes-gBefore.netBytes) / intervals / float64(f.regions))
		connected := float64(f.enterpriseRate) * (1 + secs)
		regions.SafeBound = uint64(connected * (1 + float64(f.regions)*regionSafeShare))
		run.Regions = regions
	}
	return run, nil
}

// classRows turns the counts of a run into one row per class, with each
// caller's bound computed from the policy and the elapsed time.
func classRows(load *fleetLoad, keys *perKey, calls [numClasses + 1]uint64) []FleetClass {
	secs := load.elapsed.Seconds()
	rows := make([]FleetClass, numClasses)
	for c := range numClasses {
		cc := load.classes[c]
		r := &rows[c]
		r.Class = classNames[c]
		r.Requests, r.Admitted, r.Limited, r.Errors = cc.requests, cc.ok, cc.limited, cc.other
		lo, hi := 0, keys.callers
		switch keyClass(c) {
		case classEnterprise:
			lo, hi = keys.enterprise, keys.enterprise+1
		case classAbusive:
			lo, hi = keys.abu, keys.abu+1
		}
		for id := lo; id < hi; id++ {
			if keys.requests[id] == 0 {
				continue
			}
			rate, burst := keys.limit(id)
			b, ok := uint64(burst+rate*secs), uint64(keys.ok[id])
			r.Keys++
			r.Bound += b
			r.Exact += uint64(keys.exact[id])
			if ok > b {
				r.Over += ok - b
			}
		}
		if r.Exact > 0 {
			r.Utilisation = float64(int64(float64(r.Admitted)/float64(r.Exact)*1000+0.5)) / 1000
		}
		if r.Requests > 0 {
			r.StoreCalls = float64(int64(float64(calls[c])/float64(r.Requests)*1000+0.5)) / 1000
		}
	}
	return rows
}

// liveHeap is the heap in use after a full collection, in bytes.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// fleetNotes explains how to read the fleet table.
func fleetNotes(cores int) []string {
	return []string{
		fmt.Sprintf("the machine has %d cores, shared by every instance, the load generator (this process) and redis-server; "+
			"req/s is bounded by that contention", cores),
		"instances are in-process gateways, each with its own Redis client, lease store, denial cache, breaker, stage 1 and telemetry; " +
			"workers call a uniformly chosen instance's handler directly (no sockets between caller and gateway), closed loop; the upstream is the built-in echo",
		"bound: per caller, burst + rate × elapsed (the bucket starts full), summed; over: per caller admissions beyond its bound, summed (0 = never over-admitted); " +
			"exact: what an exact token bucket per caller admits of the same requests at the instants they were sent, summed; util: admitted / exact " +
			"(the fleet decides a little after sending, so util can pass 1 slightly without over-admitting)",
		"store calls/req: script calls each instance's client sent for the class's keys, per request of the class; " +
			"redis cmd/req and scripts/req: INFO commandstats deltas over all nodes per request (cmd counts commands run inside scripts too)",
		"redis µs/req: INFO used_cpu_sys+used_cpu_user delta per request; redis MB/1M: mean MEMORY USAGE of up to 200 live callers' keys per node sampled at the end, × 1,000,000 callers with one key each, in MB of 10^6 bytes (a used_memory delta cannot see keys that expire a tenth of a second after a free caller's request); " +
			"gw MiB/inst: live heap after GC with the instances running minus before they were built, / instances; proc µs/req: this process (instances + load generator); " +
			"gen µs/req: the load generator's part (drawing the caller, signing its JWT, building the request), measured alone for 300 ms before each run",
	}
}

// writeFleetTable writes rep as an aligned table, one line per class of
// each run, with the run's own columns repeated on each line.
func writeFleetTable(w io.Writer, rep *FleetReport) error {
	fmt.Fprintf(w, "command: %s\n", rep.Command)
	for _, k := range []string{"cores", "os", "go", "redis", "load"} {
		if v, ok := rep.Machine[k]; ok {
			fmt.Fprintf(w, "%s: %s\n", k, v)
		}
	}
	var settings []string
	for _, k := range []string{"workers", "duration", "callers", "mix", "limits", "lease", "regions"} {
		if v, ok := rep.Settings[k]; ok {
			settings = append(settings, k+"="+v)
		}
	}
	fmt.Fprintf(w, "settings: %s\n\n", strings.Join(settings, "; "))
	fmt.Fprintln(w, "| "+strings.Join(fleetColumns, " | ")+" |")
	fmt.Fprintln(w, "|"+strings.Repeat("---|", len(fleetColumns)))
	for _, r := range rep.Runs {
		for _, c := range r.Classes {
			cells := []string{
				r.Topology, strconv.Itoa(r.Instances), c.Class, strconv.FormatUint(c.Keys, 10),
				strconv.FormatUint(c.Requests, 10), strconv.FormatUint(c.Admitted, 10), strconv.FormatUint(c.Bound, 10),
				strconv.FormatUint(c.Exact, 10), strconv.FormatUint(c.Over, 10), fmt.Sprintf("%.3f", c.Utilisation),
				strconv.FormatUint(c.Errors, 10), fmt.Sprintf("%.3f", c.StoreCalls),
				fmt.Sprintf("%.0f", r.RPS), fmt.Sprintf("%.2f", r.RedisCmds), fmt.Sprintf("%.2f", r.RedisCPUus),
				fmt.Sprintf("%.1f", r.RedisMBPer1M), fmt.Sprintf("%.2f", r.GatewayMiB), fmt.Sprintf("%.1f", r.ProcessCPUus),
				fmt.Sprintf("%.1f", r.GenCPUus),
			}
			fmt.Fprintln(w, "| "+strings.Join(cells, " | ")+" |")
		}
	}
	fmt.Fprintln(w)
	writeRegionsTable(w, rep)
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

// fleetColumns are the fleet table's columns, in order.
var fleetColumns = []string{
	"redis", "N", "class", "callers", "requests", "admitted", "bound", "exact", "over", "util", "errors",
	"store calls/req", "req/s", "redis cmd/req", "redis µs/req", "redis MB/1M callers", "gw MiB/inst", "proc µs/req", "gen µs/req",
}

// parseSizes parses -n: a comma-separated list of instance counts.
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 1000 {
			return nil, fmt.Errorf("%q is not an instance count in [1, 1000]", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no instance count given")
	}
	return out, nil
}

// parseFleetFlags checks the flags -mode fleet reads and fills o.fleet;
// every error names its flag.
func parseFleetFlags(o *options, sizes, topologies, cluster string) error {
	f := &o.fleet
	var err error
	if f.sizes, err = parseSizes(sizes); err != nil {
		return fmt.Errorf("-n: %v", err)
	}
	seen := map[string]bool{}
	for _, t := range strings.Split(topologies, ",") {
		t = strings.TrimSpace(t)
		if t == "" || seen[t] {
			continue
		}
		if t != topoStandalone && t != topoCluster {
			return fmt.Errorf("-topology: unknown topology %q (want %s or %s)", t, topoStandalone, topoCluster)
		}
		seen[t] = true
		f.topologies = append(f.topologies, t)
	}
	for _, a := range strings.Split(cluster, ",") {
		if a = strings.TrimSpace(a); a != "" {
			f.clusterAddrs = append(f.clusterAddrs, a)
		}
	}
	m := f.mix
	switch {
	case len(f.topologies) == 0:
		return fmt.Errorf("-topology: none given")
	case o.conns < 1:
		return fmt.Errorf("-c: must be at least 1, got %d", o.conns)
	case o.duration <= 0:
		return fmt.Errorf("-d: must be > 0, got %v", o.duration)
	case m.callers < 2 || m.callers > 100_000_000:
		return fmt.Errorf("-callers: must be in [2, 100000000], got %d", m.callers)
	case m.enterpriseShare < 0 || m.enterpriseShare > 1:
		return fmt.Errorf("-enterprise-share: must be in [0, 1], got %v", m.enterpriseShare)
	case m.abusiveShare < 0 || m.abusiveShare > 1:
		return fmt.Errorf("-abusive-share: must be in [0, 1], got %v", m.abusiveShare)
	case m.enterpriseShare+m.abusiveShare > 1:
		return fmt.Errorf("-abusive-share: with -enterprise-share above 1 (%v + %v)", m.enterpriseShare, m.abusiveShare)
	case f.enterpriseRate < 1:
		return fmt.Errorf("-enterprise-rate: must be at least 1, got %d", f.enterpriseRate)
	case f.lease != leaseOff && f.lease != leaseStatic && f.lease != leaseAuto:
		return fmt.Errorf("-lease: unknown lease mode %q (want %s, %s or %s)", f.lease, leaseOff, leaseStatic, leaseAuto)
	case f.regions < 1 || f.regions > 8:
		return fmt.Errorf("-regions: must be in [1, 8], got %d", f.regions)
	case f.regions > 1 && (f.redisAddr != "" || len(f.clusterAddrs) > 0):
		return fmt.Errorf("-regions: the bench starts the regions' redis-servers; leave -redis and -cluster out")
	case f.regions > 1 && slices.Min(f.sizes) < f.regions:
		return fmt.Errorf("-n: with -regions %d, every run needs at least %d instances, got %d", f.regions, f.regions, slices.Min(f.sizes))
	}
	return nil
}

// formatCounts writes m as "key × n" pairs in key order.
func formatCounts(m map[string]uint64) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s × %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
