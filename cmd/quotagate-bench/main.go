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
// With -mode fleet it simulates a fleet instead (see fleet.go): N
// in-process gateways, each with its own store client and caches, on a
// standalone Redis and a 3-primary Cluster, under a million Zipf-
// distributed free callers, an enterprise tenant and an abusive caller,
// reported per class of caller:
//
//	go run ./cmd/quotagate-bench -mode fleet [-n 3,10,50] [-topology standalone,cluster] [-d 10s] [-c 64] [-lease off|static|auto] [-redis ADDR] [-cluster ADDRS]
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
}

// Modes of the bench.
const (
	modeContenders = "contenders" // quotagate beside the alternatives, as processes
	modeFleet      = "fleet"      // N in-process quotagate instances on Redis, by key class
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
	fs.StringVar(&o.mode, "mode", modeContenders, "contenders: quotagate beside the alternatives; fleet: N in-process instances on Redis, reported by key class")
	sizes := fs.String("n", "3,10,50", "fleet: instance counts, one run each")
	topologies := fs.String("topology", "standalone,cluster", "fleet: Redis topologies (standalone, cluster: 3 primaries)")
	fs.IntVar(&o.fleet.mix.callers, "callers", 1000000, "fleet: free callers, Zipf-distributed")
	fs.Float64Var(&o.fleet.mix.enterpriseShare, "enterprise-share", 0.10, "fleet: share of requests from the enterprise tenant")
	fs.Float64Var(&o.fleet.mix.abusiveShare, "abusive-share", 0.05, "fleet: share of requests from the abusive caller")
	fs.IntVar(&o.fleet.enterpriseRate, "enterprise-rate", 1000, "fleet: the enterprise tenant's limit per second (and burst)")
	fs.StringVar(&o.fleet.lease, "lease", leaseOff, "fleet: the policy's lease: off, static (max_block 50, ttl 1s, instances N) or auto")
	fs.StringVar(&o.fleet.redisAddr, "redis", "", "fleet: a standalone Redis to use (flushed before each run) instead of starting one")
	fs.StringVar(&o.fleet.logPath, "instance-log", "", "fleet: write the instances' operational logs (store errors, breaker changes) to this file")
	cluster := fs.String("cluster", "", "fleet: comma-separated seed addresses of a Redis Cluster to use (flushed before each run) instead of starting one")
	fs.StringVar(&o.profileDir, "profile", "", "write a CPU profile of each quotagate run's measured part to this directory (CONTENDER-KEYS-rROUND.pprof; serves /debug/pprof on quotagate's loopback admin listener)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.mode == modeFleet {
		return o, parseFleetFlags(o, *sizes, *topologies, *cluster)
	}
	if o.mode != modeContenders {
		return nil, fmt.Errorf("-mode: unknown mode %q (want %s or %s)", o.mode, modeContenders, modeFleet)
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
		if _, ok := contenderInfo[c]; !ok {
			return nil, fmt.Errorf("-contenders: unknown contender %q (want %s)", c, strings.Join(allContenders, ", "))
		}
		seen[c] = true
		o.contenders = append(o.contenders, c)
	}
	if len(o.contenders) == 0 {
		return nil, errors.New("-contenders: none given")
	}
	return o, nil
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
