package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/gateway"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
	"github.com/quotagate/quotagate/ratelimit/regional"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/routes"
	"github.com/quotagate/quotagate/telemetry"
)

// The fleet's callers and limits. Every caller presents an HS256 JWT; the
// free users and the abusive caller are tier free, the enterprise tenant
// tier enterprise. One token-bucket policy of scope tenant limits them all
// in the store, and fails closed, so that no store error can admit.
const (
	fleetSecretEnv = "QUOTAGATE_BENCH_FLEET_JWT"
	fleetSecret    = "quotagate-bench-fleet-secret-of-32+bytes"
	enterpriseID   = "acme"
	abusiveID      = "abuser"
	freeRate       = 10 // per second, per free caller (the abusive one too)
	freeBurst      = 20
	// localFactor puts each tier's stage 1 (per instance, per caller) this
	// many times above its global limit, so that stage 2 decides.
	localFactor = 100
)

// Lease modes of the fleet's policy.
const (
	leaseOff    = "off"    // every decision goes to the store
	leaseStatic = "static" // blocks of at most 50 for 1 s, shared by the N instances
	leaseAuto   = "auto"   // lease: auto, blocks sized by each instance's own demand
)

// fleetConfig is the configuration of every instance of a fleet of n on
// Redis at addrs, the enterprise tenant limited to entRate per second
// (burst the same).
func fleetConfig(addrs []string, n int, lease string, entRate int) string {
	return fleetConfigOf(addrs, n, lease, entRate, nil)
}

// fleetConfigOf is fleetConfig, for an instance of region rs when rs is
// not nil: store.region and store.global set, and the enterprise tenant's
// limit in a policy of its own, "enterprise", shared across the regions.
func fleetConfigOf(addrs []string, n int, lease string, entRate int, rs *regionStore) string {
	var b strings.Builder
	b.WriteString("# Written by quotagate-bench -mode fleet.\n")
	b.WriteString("server: {listen: 127.0.0.1:0, admin_listen: 127.0.0.1:0}\n")
	quoted := make([]string, len(addrs))
	for i, a := range addrs {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	region := ""
	if rs != nil {
		region = fmt.Sprintf(", region: %s, global: {redis: {addrs: [%q], timeout: %s}, report_interval: %s, lease_ttl: %s}",
			rs.name, rs.global, regionGlobalTimeout, regionReportInterval, regionLeaseTTL)
	}
	// The largest deadline: on a loaded machine a decision reaches Redis
	// instead of failing (closed).
	fmt.Fprintf(&b, "store: {kind: redis, fleet_size: %d, redis: {addrs: [%s], timeout: 1s, pool_size: 64}%s}\n",
		n, strings.Join(quoted, ", "), region)
	b.WriteString("log: {level: info}\n")
	fmt.Fprintf(&b, "identity:\n  jwt: {secret_env: %s}\n", fleetSecretEnv)
	b.WriteString("tiers:\n")
	fmt.Fprintf(&b, "  free: {local: {rate: %d, per: 1s, burst: %d}}\n", localFactor*freeRate, localFactor*freeBurst)
	fmt.Fprintf(&b, "  enterprise: {local: {rate: %d, per: 1s, burst: %d}}\n", localFactor*entRate, localFactor*entRate)
	b.WriteString("policies:\n  user:\n    scope: tenant\n    algorithm: token_bucket\n    on_store_error: closed\n")
	switch lease {
	case leaseStatic:
		fmt.Fprintf(&b, "    lease: {max_block: 50, ttl: 1s, instances: %d}\n", n)
	case leaseAuto:
		b.WriteString("    lease: auto\n")
	}
	b.WriteString("    limits:\n")
	fmt.Fprintf(&b, "      free: {rate: %d, per: 1s, burst: %d}\n", freeRate, freeBurst)
	policies := "[user]"
	if rs != nil {
		fmt.Fprintf(&b, "  enterprise:\n    scope: tenant\n    algorithm: token_bucket\n    on_store_error: closed\n"+
			"    regions: {mode: leased, safe_share: %g}\n    limits:\n", regionSafeShare)
		policies = "[user, enterprise]"
	}
	fmt.Fprintf(&b, "      enterprise: {rate: %d, per: 1s, burst: %d}\n", entRate, entRate)
	b.WriteString("upstreams:\n  echo: {url: \"echo:\", timeout: 10s}\n")
	fmt.Fprintf(&b, "routes:\n  - {name: items.get, method: GET, path: \"/{rest...}\", upstream: echo, policies: %s}\n", policies)
	return b.String()
}

// fleetGetenv is the environment the instances see: the JWT secret only.
func fleetGetenv(name string) (string, bool) {
	if name == fleetSecretEnv {
		return fleetSecret, true
	}
	return "", false
}

// instance is one gateway of the fleet, built as cmd/quotagate builds one:
// its own telemetry, access log (to nowhere), Redis client, lease store,
// denial cache, breaker, fleet registration (heartbeats) and stage 1,
// sharing nothing with the others. Its store is opened with the fields
// cmd/quotagate's openStore passes, less password and TLS.
type instance struct {
	gw     *gateway.Gateway
	calls  *callCounter
	tel    *telemetry.Providers
	logOut *telemetry.LogSink
	// layer is the regional layer of an instance of a region (nil
	// otherwise), closers its clients.
	layer   *regional.Layer
	closers []io.Closer
}

// startInstance builds instance i of a fleet on cfg. Its operational log
// (store errors, breaker changes) goes to ops, tagged with i; its access
// lines are written to nothing. With cfg.Store.Global, its store has the
// regional layer (see regionWrap).
func startInstance(ctx context.Context, cfg *config.Config, i int, tags map[string]keyClass, ops io.Writer) (*instance, error) {
	in := &instance{calls: &callCounter{tags: tags}}
	tel, err := telemetry.Setup(ctx, telemetry.Options{ServiceVersion: "bench", InstanceID: fmt.Sprintf("fleet-%d", i),
		Getenv: func(string) string { return "" }})
	if err != nil {
		return nil, err
	}
	in.tel = tel
	metrics, err := telemetry.NewMetrics(tel.MeterProvider)
	if err != nil {
		in.close()
		return nil, err
	}
	tel.ExportPrimed(metrics)
	in.logOut = telemetry.NewLogSink(io.Discard, telemetry.DefaultLogLines)
	in.gw, err = gateway.New(cfg, gateway.Options{
		OpenStore: func(c config.Store) (*stack.Stack, error) {
			r := c.Redis
			var wrap func(ratelimit.Store) ratelimit.Store
			if c.Global != nil {
				rs := regionStore{name: c.Region, regional: r.Addrs[0], global: c.Global.Redis.Addrs[0]}
				wrap = regionWrap(rs, fmt.Sprintf("fleet-%d", i), &in.layer, &in.closers)
			}
			return redisstore.Open(redisstore.Config{
				Addrs: r.Addrs, PoolSize: r.PoolSize, Timeout: r.Timeout,
				BreakerFailures: r.BreakerFailures, BreakerCooldown: r.BreakerCooldown, FleetSize: c.FleetSize,
				FleetStatic: c.Fleet.Static, FleetTTL: c.Fleet.TTL, KeyPrefix: r.KeyPrefix,
				Hook: in.calls, Wrap: wrap,
			}), nil
		},
		Logger:         telemetry.NewLogger(ops, slog.LevelInfo).With(slog.Int("instance", i)),
		AccessLog:      telemetry.NewLogger(in.logOut.Access(), slog.LevelInfo),
		Metrics:        metrics,
		TracerProvider: tel.TracerProvider,
		Propagator:     tel.Propagator,
		Getenv:         fleetGetenv,
	})
	if err != nil {
		in.close()
		return nil, err
	}
	return in, nil
}

// close stops the instance and its store client.
func (in *instance) close() {
	if in.gw != nil {
		_ = in.gw.Close()
	}
	for _, c := range in.closers {
		_ = c.Close()
	}
	if in.tel != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = in.tel.Shutdown(sctx)
		cancel()
	}
	if in.logOut != nil {
		_ = in.logOut.Close()
	}
}

// keyClass is a class of callers the fleet report is broken down by.
type keyClass int

const (
	classFree       keyClass = iota // the Zipf-distributed free users
	classEnterprise                 // the one enterprise tenant
	classAbusive                    // the one caller far over its limit
	numClasses
	classOther = numClasses // store calls for no caller (PING, CLUSTER SLOTS)
)

var classNames = [numClasses]string{"zipf-free", "enterprise", "abusive"}

// classTags maps the hash tag of the enterprise tenant's and the abusive
// caller's store keys to their class; every other tenant tag is a free
// user's.
func classTags() map[string]keyClass {
	return map[string]keyClass{
		"t:" + routes.HashID("jwt:"+enterpriseID): classEnterprise,
		"t:" + routes.HashID("jwt:"+abusiveID):    classAbusive,
	}
}

// callCounter is a go-redis hook that counts the script calls an
// instance's store sends, by the class of the caller whose keys they
// touch (the hash tag of the first key), and every other command as
// classOther. Commands a script runs inside Redis are not seen here.
type callCounter struct {
	tags  map[string]keyClass // read-only
	calls [numClasses + 1]atomic.Uint64
}

func (c *callCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *callCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(cmd)
		return next(ctx, cmd)
	}
}

func (c *callCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}

func (c *callCounter) count(cmd redis.Cmder) {
	c.calls[c.classify(cmd)].Add(1)
}

// classify returns the class of a script call's first key.
func (c *callCounter) classify(cmd redis.Cmder) keyClass {
	args := cmd.Args()
	if len(args) < 4 || !isScript(strings.ToLower(cmd.Name())) {
		return classOther
	}
	key, ok := args[3].(string)
	if !ok {
		return classOther
	}
	open, close := strings.IndexByte(key, '{'), strings.IndexByte(key, '}')
	if open < 0 || close < open {
		return classOther
	}
	tag := key[open+1 : close]
	if cl, ok := c.tags[tag]; ok {
		return cl
	}
	if strings.HasPrefix(tag, "t:") {
		return classFree
	}
	return classOther
}
