package main

import (
	"bufio"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/config"
	"go.yaml.in/yaml/v3"
)

func TestHistQuantilesWithinBucketError(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h hist
	var vals []time.Duration
	for range 20000 {
		// Spread over 50ns .. ~1s on a log scale.
		d := time.Duration(float64(int64(50)<<r.IntN(25)) * (1 + r.Float64()))
		vals = append(vals, d)
		h.Record(d)
	}
	slices.Sort(vals)
	for _, q := range []float64{0, 0.5, 0.9, 0.99, 0.999, 1} {
		idx := int(q*float64(len(vals))+0.999999999) - 1
		exact := vals[max(idx, 0)]
		got := h.Quantile(q)
		if got > exact || float64(exact-got) > float64(exact)/histSub {
			t.Errorf("q%v = %v, exact %v: want at most exact and within 1/%d below", q, got, exact, histSub)
		}
	}
	if h.Count() != 20000 {
		t.Errorf("count %d", h.Count())
	}
	var empty hist
	if empty.Quantile(0.5) != 0 {
		t.Error("quantile of an empty hist is not 0")
	}
}

func TestHistBucketsAreContiguous(t *testing.T) {
	for b := 1; b < histBuckets; b++ {
		lo := bucketLow(b)
		if bucketOf(lo) != b || bucketOf(lo-1) != b-1 {
			t.Fatalf("bucket %d: low %d maps to %d, low-1 to %d", b, lo, bucketOf(lo), bucketOf(lo-1))
		}
	}
	var h hist
	h.Record(-time.Second) // counts as 0
	h.Record(time.Duration(1<<63 - 1))
	if h.Quantile(0) != 0 || h.Quantile(1) != time.Duration(1<<63-1) {
		t.Errorf("extremes: %v %v", h.Quantile(0), h.Quantile(1))
	}
}

func TestStatTimes(t *testing.T) {
	line := "4242 (a) b (c)) S 1 4240 4240 0 -1 4194560 100 0 0 0 250 75 3 4 20 0 2 0 100 0 0\n"
	g, ticks, err := statTimes(line)
	if err != nil || g != 4240 || ticks != 325 {
		t.Errorf("statTimes = %d, %d, %v; want 4240, 325", g, ticks, err)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 zz 3 4 5 6 7 8 9 10 11 12 13"} {
		if _, _, err := statTimes(bad); err == nil {
			t.Errorf("statTimes(%q): no error", bad)
		}
	}
	if _, err := selfTicks(); err != nil {
		t.Errorf("selfTicks: %v", err)
	}
}

func TestCommandStatsDelta(t *testing.T) {
	before, err := parseCommandStats("# Commandstats\r\ncmdstat_evalsha:calls=10,usec=50,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\ncmdstat_info:calls=3,usec=1\r\n")
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseCommandStats("# Commandstats\r\ncmdstat_evalsha:calls=110,usec=500\r\ncmdstat_hset:calls=100,usec=9\r\ncmdstat_client|setinfo:calls=2,usec=1\r\ncmdstat_info:calls=5,usec=1\r\n")
	if err != nil {
		t.Fatal(err)
	}
	all, scripts := after.delta(before)
	if all != 200 || scripts != 100 {
		t.Errorf("delta = %d all, %d scripts; want 200, 100", all, scripts)
	}
	if _, err := parseCommandStats("cmdstat_get:usec=1"); err == nil {
		t.Error("a line without calls parsed")
	}
}

func TestSumCounter(t *testing.T) {
	text := `# HELP quotagate_store_fallback_total x
quotagate_store_fallback_total{mode="open",policy="tenant"} 3
quotagate_store_fallback_total{mode="closed",policy="transfers"} 4
quotagate_store_fallback_total_other 100
quotagate_store_fallback_totalx{a="b"} 100
`
	n, err := sumCounter(bufio.NewScanner(strings.NewReader(text)), "quotagate_store_fallback_total")
	if err != nil || n != 7 {
		t.Errorf("sumCounter = %d, %v; want 7", n, err)
	}
}

func TestQuotagateConfigLoads(t *testing.T) {
	// Loading 10 000 keys is slow under -race: load the Redis variant, and
	// check that the memory variant differs only in its store line.
	redisCfg := quotagateConfig("http://127.0.0.1:9", 5000, "127.0.0.1:6390", 25*time.Millisecond, false, true)
	memCfg := quotagateConfig("http://127.0.0.1:9", 5000, "", 25*time.Millisecond, false, true)
	rl, ml := strings.Split(redisCfg, "\n"), strings.Split(memCfg, "\n")
	if len(rl) != len(ml) {
		t.Fatalf("variants have %d and %d lines", len(rl), len(ml))
	}
	for i := range rl {
		if rl[i] != ml[i] && !(strings.HasPrefix(rl[i], "store: {kind: redis,") && ml[i] == "store: {kind: memory}") {
			t.Errorf("line %d differs: %q vs %q", i+1, rl[i], ml[i])
		}
	}
	path := filepath.Join(t.TempDir(), "qg.yaml")
	if err := os.WriteFile(path, []byte(redisCfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config rejected: %v", err)
	}
	if len(cfg.Identity.APIKeys) != numKeys {
		t.Errorf("%d api keys, want %d", len(cfg.Identity.APIKeys), numKeys)
	}
	if got := cfg.Identity.APIKeys[7].KeySHA256; got != keyHash(benchKey(7)) {
		t.Errorf("key 7 hash %s", got)
	}
	if cfg.Store.Kind != "redis" || len(cfg.Store.Redis.Addrs) != 1 || cfg.Store.Redis.Addrs[0] != "127.0.0.1:6390" {
		t.Errorf("store %+v", cfg.Store)
	}
	if !cfg.Server.Pprof {
		t.Error("server.pprof is off in a config written for -profile")
	}
}

func TestQuotagateLeaseConfigDiffersOnlyInLease(t *testing.T) {
	plain := quotagateConfig("http://127.0.0.1:9", 5000, "127.0.0.1:6390", time.Second, false, false)
	leased := quotagateConfig("http://127.0.0.1:9", 5000, "127.0.0.1:6390", time.Second, true, false)
	if got := strings.Replace(leased, qgLease, "", 1); got != plain {
		t.Fatalf("leased config is not the plain one plus %q", qgLease)
	}
	// The lease line must land inside the tenant policy and validate:
	// load the leased variant with 2 keys' worth of identity.
	var lines []string
	keys := 0
	for _, l := range strings.Split(leased, "\n") {
		if strings.HasPrefix(l, "    - {key_sha256:") {
			if keys++; keys > 2 {
				continue
			}
		}
		lines = append(lines, l)
	}
	path := filepath.Join(t.TempDir(), "qg.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config rejected: %v", err)
	}
	l := cfg.Policies["tenant"].Lease
	if l == nil || !l.Auto {
		t.Errorf("tenant policy lease = %+v, want lease: auto", l)
	}
}

func TestTraefikConfig(t *testing.T) {
	dir := t.TempDir()
	dynPath := filepath.Join(dir, "dyn amic.yml")
	var static struct {
		EntryPoints map[string]struct {
			Address   string `yaml:"address"`
			Transport struct {
				LifeCycle struct {
					GraceTimeOut string `yaml:"graceTimeOut"`
				} `yaml:"lifeCycle"`
			} `yaml:"transport"`
		} `yaml:"entryPoints"`
		Providers struct {
			File struct {
				Filename string `yaml:"filename"`
				Watch    *bool  `yaml:"watch"`
			} `yaml:"file"`
		} `yaml:"providers"`
		API       any `yaml:"api"`
		AccessLog any `yaml:"accessLog"`
		Metrics   any `yaml:"metrics"`
		Tracing   any `yaml:"tracing"`
	}
	if err := yaml.Unmarshal([]byte(traefikStaticConfig(4711, dynPath)), &static); err != nil {
		t.Fatalf("static config is not YAML: %v", err)
	}
	web, ok := static.EntryPoints["web"]
	if !ok || len(static.EntryPoints) != 1 || web.Address != "127.0.0.1:4711" || web.Transport.LifeCycle.GraceTimeOut != "1s" {
		t.Errorf("entry points %+v", static.EntryPoints)
	}
	if f := static.Providers.File; f.Filename != dynPath || f.Watch == nil || *f.Watch {
		t.Errorf("file provider %+v", f)
	}
	if static.API != nil || static.AccessLog != nil || static.Metrics != nil || static.Tracing != nil {
		t.Error("static config enables the API, access log, metrics or tracing")
	}

	var dyn struct {
		HTTP struct {
			Routers map[string]struct {
				EntryPoints []string `yaml:"entryPoints"`
				Rule        string   `yaml:"rule"`
				Service     string   `yaml:"service"`
				Middlewares []string `yaml:"middlewares"`
			} `yaml:"routers"`
			Middlewares map[string]struct {
				RateLimit struct {
					Average         int    `yaml:"average"`
					Period          string `yaml:"period"`
					Burst           int    `yaml:"burst"`
					SourceCriterion struct {
						RequestHeaderName string `yaml:"requestHeaderName"`
					} `yaml:"sourceCriterion"`
					Redis struct {
						Endpoints []string `yaml:"endpoints"`
					} `yaml:"redis"`
				} `yaml:"rateLimit"`
			} `yaml:"middlewares"`
			Services map[string]struct {
				LoadBalancer struct {
					Servers []struct {
						URL string `yaml:"url"`
					} `yaml:"servers"`
				} `yaml:"loadBalancer"`
			} `yaml:"services"`
		} `yaml:"http"`
	}
	if err := yaml.Unmarshal([]byte(traefikDynamicConfig("http://127.0.0.1:9", "127.0.0.1:6390", 5000)), &dyn); err != nil {
		t.Fatalf("dynamic config is not YAML: %v", err)
	}
	r, ok := dyn.HTTP.Routers["all"]
	if !ok || r.Rule != "PathPrefix(`/`)" || r.Service != "upstream" || !slices.Equal(r.Middlewares, []string{"rl"}) || !slices.Equal(r.EntryPoints, []string{"web"}) {
		t.Errorf("router %+v", dyn.HTTP.Routers)
	}
	rl := dyn.HTTP.Middlewares["rl"].RateLimit
	// The same limit as every other contender: rate per second, burst rate,
	// keyed by the Authorization header the load sends.
	if rl.Average != 5000 || rl.Burst != 5000 || rl.Period != "1s" || rl.SourceCriterion.RequestHeaderName != "Authorization" {
		t.Errorf("rateLimit %+v", rl)
	}
	if !slices.Equal(rl.Redis.Endpoints, []string{"127.0.0.1:6390"}) {
		t.Errorf("redis endpoints %v", rl.Redis.Endpoints)
	}
	if s := dyn.HTTP.Services["upstream"].LoadBalancer.Servers; len(s) != 1 || s[0].URL != "http://127.0.0.1:9" {
		t.Errorf("servers %+v", s)
	}
	if got := traefikArgs("/x/t.yml"); !slices.Equal(got, []string{"--configFile=/x/t.yml"}) {
		t.Errorf("args %q", got)
	}
}

func TestTraefikSkippedWithoutBinary(t *testing.T) {
	o, err := parseFlags([]string{"-contenders", "traefik"}, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	if o.traefik != "" {
		t.Fatalf("-traefik default %q", o.traefik)
	}
	_, err = bench(context.Background(), o, "test", io.Discard)
	if err == nil || !strings.Contains(err.Error(), "no contender can run") {
		t.Errorf("bench with only traefik and no -traefik: %v", err)
	}

	o, err = parseFlags([]string{"-contenders", "bare,traefik,quotagate-lease"}, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	rep := &Report{Machine: map[string]string{}}
	e := &env{}
	if got := runnable(o, e, rep); !slices.Equal(got, []string{cBare, cQGLease}) {
		t.Errorf("runnable without -traefik = %v", got)
	}
	if len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "traefik contender was skipped") {
		t.Errorf("notes %q", rep.Notes)
	}

	o, err = parseFlags([]string{"-contenders", "traefik,quotagate-lease", "-traefik", "/nonexistent/traefik"}, &strings.Builder{})
	if err != nil || o.traefik != "/nonexistent/traefik" {
		t.Fatalf("parseFlags: %+v, %v", o, err)
	}
	rep, e = &Report{Machine: map[string]string{}}, &env{}
	if got := runnable(o, e, rep); !slices.Equal(got, []string{cTraefik, cQGLease}) || e.traefikBin != "/nonexistent/traefik" || len(rep.Notes) != 0 {
		t.Errorf("runnable with -traefik = %v, bin %q, notes %q", got, e.traefikBin, rep.Notes)
	}
}

func TestNginxConfigIsAccepted(t *testing.T) {
	bin := findNginx()
	if bin == "" {
		t.Skip("nginx is not installed")
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(nginxConfig(dir, 1, "127.0.0.1:9", 1000)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "-t", "-p", dir+"/", "-c", conf, "-e", filepath.Join(dir, "e.log")).CombinedOutput()
	if err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
}

func TestPickersStayInRange(t *testing.T) {
	for _, mix := range allMixes {
		p, err := newPicker(mix, 3)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int]bool{}
		for range 5000 {
			k := p()
			if k < 0 || k >= numKeys {
				t.Fatalf("%s: key %d out of range", mix, k)
			}
			seen[k] = true
		}
		switch {
		case mix == mixOne && len(seen) != 1,
			mix == mixUniform && len(seen) < 3000,
			mix == mixZipf && (len(seen) < 50 || len(seen) > 3000):
			t.Errorf("%s: %d distinct keys in 5000 picks", mix, len(seen))
		}
	}
}

func TestAggregateRatios(t *testing.T) {
	mk := func(c string, round int, reqs uint64, cTicks, rTicks uint64, redis bool) sample {
		l := &loadResult{Elapsed: time.Second, Requests: reqs, OK: reqs}
		l.Latency.Record(time.Millisecond)
		s := sample{Round: round, Mix: mixOne, Contender: c, Load: l, ContenderTicks: cTicks, RedisTicks: rTicks}
		if redis {
			cmds, scripts, reads := 4*reqs, reqs, reqs/4
			s.RedisCmds, s.RedisScripts, s.RedisReads = &cmds, &scripts, &reads
		}
		return s
	}
	samples := []sample{
		mk(cEvalsha, 1, 1000, 10, 10, true), mk(cEvalsha, 2, 1000, 10, 10, true), // 200 µs/req total
		mk(cQGRedis, 1, 2000, 20, 0, true), mk(cQGRedis, 2, 2000, 20, 0, true), // 100 µs/req
		mk(cNginx, 1, 4000, 4, 0, false), mk(cNginx, 2, 4000, 4, 0, false), // 10 µs/req
	}
	rows := aggregate(samples, []string{mixOne}, []string{cEvalsha, cQGRedis, cNginx, cBare})
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3 (bare did not run)", len(rows))
	}
	qg := rows[1]
	if qg.RPS != 2000 || len(qg.RPSRounds) != 2 || qg.CPUus != 100 || *qg.RedisCPUus != 0 || *qg.RedisCmds != 4 || *qg.RedisReads != 0.25 {
		t.Errorf("quotagate-redis row: %+v", qg)
	}
	if *qg.RPSvsEvalsha != 2 || *qg.CPUvsEvalsha != 0.5 || *qg.RPSvsNginx != 0.5 || *qg.CPUvsNginx != 10 {
		t.Errorf("ratios: rps/evalsha %v cpu/evalsha %v rps/nginx %v cpu/nginx %v",
			*qg.RPSvsEvalsha, *qg.CPUvsEvalsha, *qg.RPSvsNginx, *qg.CPUvsNginx)
	}
	var b strings.Builder
	if err := writeTable(&b, &Report{Rows: rows}); err != nil || !strings.Contains(b.String(), "2.00x") {
		t.Errorf("table: %v\n%s", err, b.String())
	}
}

func TestParseReadsProcessed(t *testing.T) {
	n, err := parseReadsProcessed("# Stats\r\ntotal_commands_processed:9\r\ntotal_reads_processed:1234\r\ntotal_writes_processed:1200\r\n")
	if err != nil || n != 1234 {
		t.Errorf("got %d, %v; want 1234", n, err)
	}
	for _, bad := range []string{"# Stats\r\n", "total_reads_processed:x\r\n"} {
		if _, err := parseReadsProcessed(bad); err == nil || !strings.Contains(err.Error(), "total_reads_processed") {
			t.Errorf("%q: error %v, want one naming total_reads_processed", bad, err)
		}
	}
}

func TestFallbackNotesWarnAboveOnePercent(t *testing.T) {
	few, many := uint64(10), uint64(11)
	rows := []Row{
		{Keys: mixOne, Contender: cQGRedis, Requests: 1000, StoreFallbacks: &few},
		{Keys: mixZipf, Contender: cQGRedis, Requests: 1000, StoreFallbacks: &many},
		{Keys: mixZipf, Contender: cBare, Requests: 1000},
	}
	got := fallbackNotes(rows)
	if len(got) != 1 || !strings.Contains(got[0], "keys=zipf") || !strings.Contains(got[0], "1.1%") {
		t.Errorf("fallbackNotes = %q, want one warning for zipf at 1.1%%", got)
	}
}
