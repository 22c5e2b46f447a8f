package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// bench starts everything o asks for, runs the rounds and returns the
// report. Every process it started is stopped before it returns.
func bench(ctx context.Context, o *options, command string, progress io.Writer) (*Report, error) {
	dir, err := os.MkdirTemp("", "quotagate-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ps := &procs{}
	defer ps.stopAll()

	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this binary: %w", err)
	}
	rep := &Report{
		Command: command,
		Machine: map[string]string{
			"cores": strconv.Itoa(runtime.NumCPU()),
			"os":    runtime.GOOS + "/" + runtime.GOARCH,
			"go":    runtime.Version(),
			"load":  "loadavg at start " + loadAvg(),
		},
		Settings: map[string]string{
			"conns": strconv.Itoa(o.conns), "duration": o.duration.String(), "warmup": o.warmup.String(),
			"rounds": strconv.Itoa(o.rounds), "keys": strings.Join(o.mixes, ","),
			"rate":          strconv.Itoa(o.rate) + "/s per key (burst " + strconv.Itoa(o.rate) + ")",
			"redis_timeout": o.timeout.String(),
		},
	}
	e := &env{ps: ps, dir: dir, self: self, rate: o.rate, timeout: o.timeout, profileDir: o.profileDir}
	if e.profileDir != "" {
		if err := os.MkdirAll(e.profileDir, 0o755); err != nil {
			return nil, fmt.Errorf("-profile: %w", err)
		}
	}

	contenders := runnable(o, e, rep)
	needRedis, needQG, needBase := false, false, false
	for _, c := range contenders {
		needRedis = needRedis || contenderInfo[variant(c)].usesRedis
		needQG = needQG || (isQuotagate(c) && !onBaseline(c))
		needBase = needBase || onBaseline(c)
	}
	if len(contenders) == 0 {
		return nil, fmt.Errorf("no contender can run")
	}
	rep.Settings["contenders"] = strings.Join(contenders, ",")
	if o.mode == modeOpen {
		rep.Settings["mode"] = modeOpen
		rep.Settings["open_rates"] = joinF(o.openRates, "%g") + " % of " + o.openRef + "'s closed-loop capacity"
		rep.Settings["open_ref"] = o.openRef
		rep.Settings["open_rounds"] = strconv.Itoa(o.openRounds)
		if !slices.Contains(contenders, o.openRef) {
			return nil, fmt.Errorf("-open-ref: %s cannot run here", o.openRef)
		}
	}

	fmt.Fprintln(progress, "starting upstream")
	upProc, upAddr, err := startSelf(ctx, e, cmdUpstream)
	if err != nil {
		return nil, err
	}
	e.upstream = "http://" + upAddr
	if needRedis {
		fmt.Fprintln(progress, "starting redis-server")
		if e.redis, err = startRedis(ctx, ps, dir, false); err != nil {
			return nil, err
		}
		defer e.redis.client.Close()
		rep.Machine["redis"] = e.redis.version(ctx)
	}
	if needQG || needBase {
		if e.qgBin = o.quotagate; e.qgBin == "" {
			fmt.Fprintln(progress, "building quotagate")
			if e.qgBin, err = buildQuotagate(ctx, dir); err != nil {
				return nil, err
			}
		}
		rep.Machine["quotagate"] = binVersion(e.qgBin)
	}
	if needBase {
		e.qgBase = o.baseline
		rep.Machine["baseline"] = binVersion(e.qgBase)
	}
	running := map[string]*contender{}
	for _, name := range contenders {
		fmt.Fprintf(progress, "starting %s\n", name)
		c, err := startContender(ctx, e, name)
		if err != nil {
			return nil, fmt.Errorf("starting %s: %w", name, err)
		}
		running[name] = c
	}

	auth := make([][]string, numKeys)
	for i := range auth {
		auth[i] = []string{"Bearer " + benchKey(i)}
	}
	r := &runner{o: o, e: e, up: upProc, auth: auth, running: running, progress: progress}
	if o.mode == modeOpen {
		if err := r.openBench(ctx, rep, contenders); err != nil {
			return nil, err
		}
	} else {
		samples, err := r.closedRounds(ctx, contenders)
		if err != nil {
			return nil, err
		}
		rep.Rows = aggregate(samples, o.mixes, contenders)
		rep.Baseline = baselineRatios(samples, o.mixes, contenders)
	}
	rep.Machine["load"] += ", at end " + loadAvg()
	rep.Notes = append(rep.Notes, fallbackNotes(rep.Rows)...)
	rep.Notes = append(rep.Notes, notes(runtime.NumCPU())...)
	if len(rep.Baseline) > 0 {
		rep.Notes = append(rep.Notes, baselineNote)
	}
	if len(rep.Open) > 0 {
		rep.Notes = append(rep.Notes, openNotes...)
	}
	return rep, nil
}

// runner runs loads against the started contenders.
type runner struct {
	o        *options
	e        *env
	up       *proc
	auth     [][]string
	running  map[string]*contender
	progress io.Writer
}

// closedRounds runs o.rounds closed-loop rounds of contenders under every
// key mix, in the order roundOrder gives each round.
func (r *runner) closedRounds(ctx context.Context, contenders []string) ([]sample, error) {
	o := r.o
	var samples []sample
	for round := range o.rounds {
		for _, mix := range o.mixes {
			for _, name := range roundOrder(contenders, round) {
				c := r.running[name]
				s, err := measure(ctx, r.e, c, r.up, round+1, loadSpec{
					URL: c.base + requestURI, Conns: o.conns, Duration: o.duration,
					Warmup: o.warmup, Mix: mix, Auth: r.auth,
				})
				if err != nil {
					return nil, fmt.Errorf("round %d, keys %s, %s: %w", round+1, mix, c.name, err)
				}
				samples = append(samples, *s)
				l := s.Load
				fmt.Fprintf(r.progress, "round %d/%d keys=%-7s %-21s %8.0f req/s  p99 %-8s 200:%d 429:%d other:%d  load %s\n",
					round+1, o.rounds, mix, c.name, float64(l.Requests)/l.Elapsed.Seconds(),
					fmtUS(float64(l.Latency.Quantile(0.99))/1e3), l.OK, l.Limited, l.Other+l.Errors, s.LoadAvg)
			}
		}
	}
	return samples, nil
}

// openBench measures o.openRef's closed-loop capacity on every key mix
// (o.rounds runs, their median), then runs every contender open loop at
// each of o.openRates percent of it, o.openRounds rounds, and puts both
// in rep.
func (r *runner) openBench(ctx context.Context, rep *Report, contenders []string) error {
	o := r.o
	fmt.Fprintf(r.progress, "measuring %s's closed-loop capacity\n", o.openRef)
	capSamples, err := r.closedRounds(ctx, []string{o.openRef})
	if err != nil {
		return err
	}
	rep.Rows = aggregate(capSamples, o.mixes, []string{o.openRef})
	capacity := map[string]float64{}
	for _, row := range rep.Rows {
		c := Capacity{Keys: row.Keys, Contender: row.Contender, RPSRounds: row.RPSRounds, RPS: round1(spreadOf(row.RPSRounds).Median)}
		rep.Capacity = append(rep.Capacity, c)
		capacity[row.Keys] = c.RPS
	}
	// The reference: the upstream itself, loaded directly, so that each
	// contender's row says what putting it in front of the upstream adds.
	r.running[cUpstream] = &contender{name: cUpstream, base: r.e.upstream, proc: r.up}
	var samples []sample
	for round := range o.openRounds {
		for _, mix := range o.mixes {
			for pi, pct := range o.openRates {
				rate := capacity[mix] * pct / 100
				for _, run := range openOrder(contenders, round+pi) {
					c := r.running[run.name]
					s, err := measure(ctx, r.e, c, r.up, round+1, loadSpec{
						URL: c.base + requestURI, Conns: o.conns, Duration: o.duration,
						Warmup: o.warmup, Mix: mix, Auth: r.auth, Rate: rate,
					})
					if err != nil {
						return fmt.Errorf("open round %d, keys %s, %g%%, %s: %w", round+1, mix, pct, c.name, err)
					}
					s.Percent, s.PairOf = pct, run.pairOf
					samples = append(samples, *s)
					l := s.Load
					fmt.Fprintf(r.progress, "open %d/%d keys=%-7s %3g%% %-21s offered %6.0f achieved %6.0f req/s  p99 %-8s unsent:%d other:%d  load %s\n",
						round+1, o.openRounds, mix, pct, c.name, rate, float64(l.Requests)/l.Elapsed.Seconds(),
						fmtUS(float64(l.Latency.Quantile(0.99))/1e3), l.Unsent, l.Other+l.Errors, s.LoadAvg)
				}
			}
		}
	}
	rep.Open = aggregateOpen(samples, o.mixes, o.openRates, contenders)
	return nil
}

// openRun is one run of the open loop: a contender, or the upstream
// loaded directly for the contender pairOf.
type openRun struct{ name, pairOf string }

// openOrder is the order of the open loop's runs at one rate in round
// (from 0): the contenders in roundOrder's order, each next to a run of
// the upstream of its own (before it in even rounds, after it in odd
// ones), so that what a contender adds over the upstream alone is read
// from two runs seconds apart on a machine whose load moves by the minute.
func openOrder(contenders []string, round int) []openRun {
	var out []openRun
	for _, c := range roundOrder(contenders, round) {
		pair := []openRun{{name: cUpstream, pairOf: c}, {name: c}}
		if round%2 == 1 {
			pair[0], pair[1] = pair[1], pair[0]
		}
		out = append(out, pair...)
	}
	return out
}

// baselineNote explains the baseline comparison.
const baselineNote = "main/base: each quotagate contender against its twin on -quotagate-baseline, run next to it in every round (the two take turns at going first); " +
	"req/s main/base: the round's throughput ratio; cpu/req main/base: the ratio of CPU per request of quotagate + redis-server; " +
	"median [lowest–highest] of the rounds; holds: throughput at least 0.95x and CPU at most 1.05x, in the medians"

// openNotes explain the open-loop table.
var openNotes = []string{
	"open loop: requests are due at fixed intervals (offered rate = the percentage of the capacity line's req/s) and taken by the first of -c connections free; " +
		"each latency runs from the request's due time, so a request that waits for a connection counts its wait (no coordinated omission)",
	"+p50/+p99/+p99.9: the row's quantile minus that of the bare proxy's runs made next to this contender's (one per round, at the same key mix and rate), both pooled over the rounds; " +
		"+p99 rounds: the same for each round alone; negative when the two are within noise. The bare row pools all its runs",
	"achieved: answered requests / time from the first due time to the last answer; unsent: requests still due when the drain (half the run, at least 1 s, after its end) ran out, counted in the latency from due time to then; " +
		"lag p99: how late requests went out after they were due (the load generator's own delay, or every connection busy); errors: transport errors and statuses other than 200 and 429",
}

// measure runs one load against c in round and reads the CPU and Redis
// counters around its measured part (and, with e.profileDir, a CPU profile
// of a quotagate contender).
func measure(ctx context.Context, e *env, c *contender, up *proc, round int, spec loadSpec) (*sample, error) {
	s := &sample{Round: round, Mix: spec.Mix, Contender: c.name, LoadAvg: loadAvg1()}
	usesRedis := contenderInfo[variant(c.name)].usesRedis
	if e.redis != nil {
		// Every run starts from empty buckets.
		if err := e.redis.client.FlushAll(ctx).Err(); err != nil {
			return nil, fmt.Errorf("FLUSHALL: %w", err)
		}
	}
	groups := []int{c.proc.pgid, up.pgid}
	if e.redis != nil {
		groups = append(groups, e.redis.proc.pgid)
	}
	var (
		before, after           map[int]uint64
		selfBefore, selfAfter   uint64
		cmdBefore, cmdAfter     cmdCounts
		readsBefore, readsAfter uint64
		fbBefore, fbAfter       uint64
		errStart, errEnd        error
	)
	snapshot := func(ticks *map[int]uint64, self *uint64, cmds *cmdCounts, reads, fb *uint64) error {
		var err error
		if *ticks, err = cpuTicks(groups); err != nil {
			return err
		}
		if *self, err = selfTicks(); err != nil {
			return err
		}
		if usesRedis {
			if *cmds, err = e.redis.commandStats(ctx); err != nil {
				return err
			}
			if *reads, err = e.redis.readsProcessed(ctx); err != nil {
				return err
			}
		}
		if c.admin != "" {
			if *fb, err = storeFallbacks(ctx, c.admin); err != nil {
				return fmt.Errorf("reading quotagate metrics: %w", err)
			}
		}
		return nil
	}
	var profErr chan error
	res, err := runLoad(ctx, spec,
		func() {
			errStart = snapshot(&before, &selfBefore, &cmdBefore, &readsBefore, &fbBefore)
			if e.profileDir != "" && c.admin != "" {
				profErr = make(chan error, 1)
				path := filepath.Join(e.profileDir, fmt.Sprintf("%s-%s-r%d.pprof", c.name, spec.Mix, round))
				go func() { profErr <- cpuProfile(ctx, c.admin, max(1, int(spec.Duration.Seconds())), path) }()
			}
		},
		func() { errEnd = snapshot(&after, &selfAfter, &cmdAfter, &readsAfter, &fbAfter) })
	if profErr != nil {
		if err := <-profErr; err != nil {
			return nil, fmt.Errorf("CPU profile: %w", err)
		}
	}
	if err != nil {
		return nil, err
	}
	if errStart != nil || errEnd != nil {
		return nil, fmt.Errorf("reading counters: %v %v", errStart, errEnd)
	}
	if c.proc.exited() {
		return nil, fmt.Errorf("%s exited during the run:\n%s", c.name, c.proc.output())
	}
	if res.Requests == 0 {
		return nil, fmt.Errorf("no request completed")
	}
	s.Load = res
	s.ContenderTicks = after[c.proc.pgid] - before[c.proc.pgid]
	s.UpstreamTicks = after[up.pgid] - before[up.pgid]
	s.LoadgenTicks = selfAfter - selfBefore
	if usesRedis {
		s.RedisTicks = after[e.redis.proc.pgid] - before[e.redis.proc.pgid]
		all, scripts := cmdAfter.delta(cmdBefore)
		s.RedisCmds, s.RedisScripts = &all, &scripts
		// The snapshot's own INFO calls are 2 reads; not worth subtracting.
		reads := readsAfter - readsBefore
		s.RedisReads = &reads
	}
	if c.admin != "" {
		d := fbAfter - fbBefore
		s.StoreFallbacks = &d
	}
	return s, nil
}

// fallbackNotes warns about rows where more than 1% of quotagate's
// decisions fell back to on_store_error: those rows mostly measure the
// fallback, not the store.
func fallbackNotes(rows []Row) []string {
	var out []string
	for _, r := range rows {
		if r.StoreFallbacks == nil || r.Requests == 0 || *r.StoreFallbacks*100 <= r.Requests {
			continue
		}
		out = append(out, fmt.Sprintf("WARNING %s keys=%s: %.1f%% of decisions fell back to on_store_error: open (store deadline missed or breaker open); "+
			"this row does not measure the store. Raise -redis-timeout or lower -c",
			r.Contender, r.Keys, 100*float64(*r.StoreFallbacks)/float64(r.Requests)))
	}
	return out
}

// notes explains how to read the table.
func notes(cores int) []string {
	return []string{
		fmt.Sprintf("the machine has %d cores, shared by the load generator (this process), the upstream, redis-server and the contender under load; "+
			"throughput and latency are bounded by that contention and are comparable only between rows of one run. "+
			"CPU per request is the better measure of each contender's own cost", cores),
		"cpu µs/req: utime+stime of the contender's process group (/proc, 10 ms ticks) over the measured time / requests; " +
			"redis µs/req: the same for redis-server; gen µs/req: the load generator",
		"redis cmd/req: INFO commandstats delta / requests, counting commands called from scripts too; redis reads/req: INFO stats total_reads_processed delta / requests (socket reads by redis-server; below 1 when requests share pipelines); fallbacks: quotagate decisions made by on_store_error (store failed or missed its deadline)",
		"rps/evalsha, rps/nginx: throughput ratio; cpu/evalsha, cpu/nginx: ratio of CPU per request of contender + redis-server",
		"latency: log-linear histogram (buckets within 0.8%), from sending the request to reading the whole answer, closed loop",
	}
}

// loadAvg1 returns the 1-minute load average, or "?".
func loadAvg1() string {
	l, _, _ := strings.Cut(loadAvg(), " ")
	return l
}

// loadAvg returns the 1, 5 and 15 minute load averages from /proc/loadavg,
// or "?" when it cannot be read. Other work on the machine shows here.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// runnable returns the contenders of o that can run here, in o's order,
// with a note in rep for each one skipped (nginx not installed, -traefik
// not given), and sets e's binaries for those that need one.
func runnable(o *options, e *env, rep *Report) []string {
	var contenders []string
	for _, c := range o.contenders {
		switch c {
		case cNginx:
			if e.nginxBin = findNginx(); e.nginxBin == "" {
				rep.Notes = append(rep.Notes, "nginx is not installed: the nginx contender was skipped")
				continue
			}
			rep.Machine["nginx"] = nginxVersion(e.nginxBin)
		case cTraefik:
			if e.traefikBin = o.traefik; e.traefikBin == "" {
				rep.Notes = append(rep.Notes, "-traefik not given: the traefik contender was skipped (shared/peers/traefik/build.sh builds it)")
				continue
			}
			rep.Machine["traefik"] = traefikBinVersion(e.traefikBin)
		}
		contenders = append(contenders, c)
	}
	return contenders
}
