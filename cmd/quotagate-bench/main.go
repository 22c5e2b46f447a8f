// Command quotagate-bench runs quotagate side by side with the usual
// alternatives under the same load, in one run, on free 127.0.0.1 ports:
//
//	bare              httputil.ReverseProxy, no limiting
//	evalsha           the same proxy + one EVALSHA token-bucket script per request
//	quotagate-memory  quotagate with store.kind memory
//	quotagate-redis   quotagate with store.kind redis
//	quotagate-lease   quotagate with store.kind redis and the policy leasing blocks
//	nginx             nginx limit_req (skipped when nginx is not installed)
//	traefik           Traefik's RateLimit middleware on Redis (skipped without -traefik BIN)
//
// Each contender, the shared upstream and redis-server run as processes of
// their own, so that CPU per request is read from /proc (Linux only). The
// load generator runs in this process: a fixed number of keep-alive
// connections, each sending its next request when the previous answer
// arrives, for a fixed time, with API keys drawn from one of three mixes.
// Rounds alternate the contenders to spread machine noise.
//
//	go run ./cmd/quotagate-bench [-c 64] [-d 10s] [-rounds 2] [-keys all] [-contenders ...] [-traefik BIN] [-json FILE]
//
// With -quotagate-baseline BIN every quotagate contender X gets a twin
// X@base run on BIN with the same settings, next to X in every round
// (baseline.go), and the report adds, per key mix, the ratios main/base of
// throughput and of CPU per request: the median of the rounds and their
// spread.
//
// With -mode open it measures latency under a constant offered rate
// instead (open.go): first the closed-loop capacity of quotagate
// (-open-ref, by default quotagate-lease) on each key mix, -rounds runs,
// their median; then every contender at -open-rates percent of it, each
// request's latency taken from the time it was due, and reported as what
// the contender adds over the upstream alone (loaded directly, in a run
// next to the contender's) at the same rate:
//
//	go run ./cmd/quotagate-bench -mode open [-open-rates 25,50,80] [-open-ref quotagate-lease] [-open-rounds 1] ...
//
// With -mode fleet it simulates a fleet instead (see fleet.go): N
// in-process gateways, each with its own store client and caches, on a
// standalone Redis and a 3-primary Cluster, under a million Zipf-
// distributed free callers, an enterprise tenant and an abusive caller,
// reported per class of caller:
//
//	go run ./cmd/quotagate-bench -mode fleet [-n 3,10,50] [-topology standalone,cluster] [-d 10s] [-c 64] [-lease off|static|auto] [-redis ADDR] [-cluster ADDRS] [-regions R]
//
// Every process it starts is stopped when it exits, also on Ctrl-C.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// childEnv marks a process started by the bench to run a hidden
// subcommand; test binaries look for it.
const childEnv = "QUOTAGATE_BENCH_CHILD"

func main() {
	if len(os.Args) > 1 && isChildCommand(os.Args[1]) {
		if err := runChild(os.Args[1], os.Args[2:], os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "quotagate-bench:", err)
			os.Exit(2)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "quotagate-bench:", err)
		}
		stop()
		os.Exit(1)
	}
}

// isChildCommand reports whether name is a hidden subcommand.
func isChildCommand(name string) bool {
	switch name {
	case cmdUpstream, cmdBareProxy, cmdEvalshaProxy:
		return true
	}
	return false
}

// options are the command-line settings.
type options struct {
	conns      int
	duration   time.Duration
	warmup     time.Duration
	rounds     int
	mixes      []string
	contenders []string
	quotagate  string
	traefik    string
	rate       int
	timeout    time.Duration
	jsonPath   string
	// mode is modeContenders (the default) or modeFleet; fleet holds the
	// settings only the fleet mode reads.
	mode  string
	fleet fleetOptions
	// profileDir, when set, receives a CPU profile of every quotagate
	// contender's measured part of every run.
	profileDir string
	// baseline is the second quotagate binary (-quotagate-baseline); ""
	// without one.
	baseline string
	// Open mode only: the rates as percentages of the capacity of the
	// reference contender openRef, and the rounds of the open loop.
	openRates  []float64
	openRef    string
	openRounds int
}

// Modes of the bench.
const (
	modeContenders = "contenders" // quotagate beside the alternatives, as processes
	modeFleet      = "fleet"      // N in-process quotagate instances on Redis, by key class
	modeOpen       = "open"       // the contenders at constant offered rates, latency from due times
)

// parseFlags parses args; every error names the flag.
func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("quotagate-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	fs.IntVar(&o.conns, "c", 64, "concurrent keep-alive connections (one worker each)")
	fs.DurationVar(&o.duration, "d", 10*time.Second, "measured duration of each run")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured load before each run")
	fs.IntVar(&o.rounds, "rounds", 2, "rounds; each runs every contender under every key mix")
	keys := fs.String("keys", "all", "key mixes, comma-separated: one (one tenant), uniform (10,000 keys), zipf; or all")
	contenders := fs.String("contenders", strings.Join(allContenders, ","), "comma-separated contenders")
	fs.StringVar(&o.quotagate, "quotagate", "", "prebuilt quotagate binary (default: go build it)")
	fs.StringVar(&o.traefik, "traefik", "", "Traefik v3.7 binary for the traefik contender (without it, that row is skipped)")
	fs.IntVar(&o.rate, "rate", 100000, "limit per API key, requests per second (also the burst), for every limiter")
	fs.DurationVar(&o.timeout, "redis-timeout", time.Second, "quotagate store.redis.timeout; the default is the largest allowed, so that on a loaded machine decisions reach Redis instead of failing open")
	fs.StringVar(&o.jsonPath, "json", "", `also write the report as JSON to this file ("-": stdout, instead of the table)`)
	fs.StringVar(&o.mode, "mode", modeContenders, "contenders: quotagate beside the alternatives, closed loop; open: the same contenders at constant offered rates (see -open-rates); fleet: N in-process instances on Redis, reported by key class")
	fs.StringVar(&o.baseline, "quotagate-baseline", "", "a second quotagate binary: each quotagate contender X gets a twin X@base run on it with the same settings, next to X in every round, and the report gives the ratios main/base of throughput and CPU per request per key mix (median of the rounds, with their spread)")
	openRates := fs.String("open-rates", "25,50,80", "open: offered rates as percentages of -open-ref's closed-loop capacity, measured first in the same run (-rounds runs per key mix, their median); "+
		"requests are due at fixed intervals and each latency runs from its due time, so queueing behind a stall is measured, not omitted")
	fs.StringVar(&o.openRef, "open-ref", "", "open: the contender whose closed-loop capacity sets the rates (default quotagate-lease, else the first quotagate contender)")
	fs.IntVar(&o.openRounds, "open-rounds", 1, "open: rounds of the open loop; each runs every contender at every rate under every key mix")
	sizes := fs.String("n", "3,10,50", "fleet: instance counts, one run each")
	topologies := fs.String("topology", "standalone,cluster", "fleet: Redis topologies (standalone, cluster: 3 primaries)")
	fs.IntVar(&o.fleet.mix.callers, "callers", 1000000, "fleet: free callers, Zipf-distributed")
	fs.Float64Var(&o.fleet.mix.enterpriseShare, "enterprise-share", 0.10, "fleet: share of requests from the enterprise tenant")
	fs.Float64Var(&o.fleet.mix.abusiveShare, "abusive-share", 0.05, "fleet: share of requests from the abusive caller")
	fs.IntVar(&o.fleet.enterpriseRate, "enterprise-rate", 1000, "fleet: the enterprise tenant's limit per second (and burst)")
	fs.StringVar(&o.fleet.lease, "lease", leaseOff, "fleet: the policy's lease: off, static (max_block 50, ttl 1s, instances N) or auto")
	fs.StringVar(&o.fleet.redisAddr, "redis", "", "fleet: a standalone Redis to use (flushed before each run) instead of starting one")
	fs.IntVar(&o.fleet.regions, "regions", 1, "fleet: regions to split the instances over, each on a redis-server of its own, the enterprise limit one quota across them granted by a global redis-server (1: one fleet on one Redis)")
	fs.StringVar(&o.fleet.logPath, "instance-log", "", "fleet: write the instances' operational logs (store errors, breaker changes) to this file")
	cluster := fs.String("cluster", "", "fleet: comma-separated seed addresses of a Redis Cluster to use (flushed before each run) instead of starting one")
	fs.StringVar(&o.profileDir, "profile", "", "write a CPU profile of each quotagate run's measured part to this directory (CONTENDER-KEYS-rROUND.pprof; serves /debug/pprof on quotagate's loopback admin listener)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.mode == modeFleet {
		return o, parseFleetFlags(o, *sizes, *topologies, *cluster)
	}
	if o.mode != modeContenders && o.mode != modeOpen {
		return nil, fmt.Errorf("-mode: unknown mode %q (want %s, %s or %s)", o.mode, modeContenders, modeOpen, modeFleet)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	switch {
	case o.conns < 1:
		return nil, fmt.Errorf("-c: must be at least 1, got %d", o.conns)
	case o.duration <= 0:
		return nil, fmt.Errorf("-d: must be > 0, got %v", o.duration)
	case o.warmup < 0:
		return nil, fmt.Errorf("-warmup: must be >= 0, got %v", o.warmup)
	case o.rounds < 1:
		return nil, fmt.Errorf("-rounds: must be at least 1, got %d", o.rounds)
	case o.rate < 1:
		return nil, fmt.Errorf("-rate: must be at least 1, got %d", o.rate)
	case o.timeout <= 0 || o.timeout > time.Second:
		return nil, fmt.Errorf("-redis-timeout: must be in (0, 1s], got %v", o.timeout)
	}
	if *keys == "all" {
		o.mixes = allMixes
	} else {
		for _, k := range strings.Split(*keys, ",") {
			if k = strings.TrimSpace(k); k == "" || slices.Contains(o.mixes, k) {
				continue
			}
			if _, err := newPicker(k, 0); err != nil {
				return nil, fmt.Errorf("-keys: %v", err)
			}
			o.mixes = append(o.mixes, k)
		}
		if len(o.mixes) == 0 {
			return nil, errors.New("-keys: none given")
		}
	}
	seen := map[string]bool{}
	for _, c := range strings.Split(*contenders, ",") {
		c = strings.TrimSpace(c)
		if c == "" || seen[c] {
			continue
		}
		if _, ok := contenderInfo[variant(c)]; !ok {
			return nil, fmt.Errorf("-contenders: unknown contender %q (want %s)", c, strings.Join(allContenders, ", "))
		}
		if onBaseline(c) && o.baseline == "" {
			return nil, fmt.Errorf("-contenders: %s runs on the baseline binary; give -quotagate-baseline", c)
		}
		seen[c] = true
		o.contenders = append(o.contenders, c)
	}
	if len(o.contenders) == 0 {
		return nil, errors.New("-contenders: none given")
	}
	if o.baseline != "" {
		o.contenders = withTwins(o.contenders)
		if !slices.ContainsFunc(o.contenders, isQuotagate) {
			return nil, errors.New("-quotagate-baseline: no quotagate contender in -contenders")
		}
	}
	if o.mode == modeOpen {
		return o, parseOpenFlags(o, *openRates)
	}
	return o, nil
}

// parseOpenFlags checks and sets the open mode's settings.
func parseOpenFlags(o *options, rates string) error {
	if o.openRounds < 1 {
		return fmt.Errorf("-open-rounds: must be at least 1, got %d", o.openRounds)
	}
	for _, f := range strings.Split(rates, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v <= 0 || v > 1000 {
			return fmt.Errorf("-open-rates: want percentages in (0, 1000], got %q", f)
		}
		if !slices.Contains(o.openRates, v) {
			o.openRates = append(o.openRates, v)
		}
	}
	if len(o.openRates) == 0 {
		return errors.New("-open-rates: none given")
	}
	if o.openRef == "" {
		if slices.Contains(o.contenders, cQGLease) {
			o.openRef = cQGLease
		} else if i := slices.IndexFunc(o.contenders, func(c string) bool { return isQuotagate(c) && !onBaseline(c) }); i >= 0 {
			o.openRef = o.contenders[i]
		} else {
			return errors.New("-open-ref: no quotagate contender in -contenders to measure the capacity of; name one")
		}
	}
	if !slices.Contains(o.contenders, o.openRef) {
		return fmt.Errorf("-open-ref: %s is not in -contenders", o.openRef)
	}
	return nil
}

// run parses args, runs the benchmark and writes the report to stdout;
// progress goes to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.mode == modeFleet {
		rep, err := fleetBench(ctx, o, "quotagate-bench "+strings.Join(args, " "), stderr)
		if err != nil {
			return err
		}
		return writeReport(stdout, o.jsonPath, rep, func(w io.Writer) error { return writeFleetTable(w, rep) })
	}
	rep, err := bench(ctx, o, "quotagate-bench "+strings.Join(args, " "), stderr)
	if err != nil {
		return err
	}
	return writeReport(stdout, o.jsonPath, rep, func(w io.Writer) error { return writeTable(w, rep) })
}

// writeReport writes rep as JSON to stdout when jsonPath is "-"; else the
// table to stdout and, with a jsonPath, the JSON to that file.
func writeReport(stdout io.Writer, jsonPath string, rep any, table func(io.Writer) error) error {
	if jsonPath == "-" {
		return writeJSON(stdout, rep)
	}
	if err := table(stdout); err != nil {
		return err
	}
	if jsonPath != "" {
		f, err := os.Create(jsonPath)
		if err != nil {
			return err
		}
		if err := writeJSON(f, rep); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	return nil
}
