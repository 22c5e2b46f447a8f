package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// sample is what one measured run of one contender under one key mix
// produced.
type sample struct {
	Round     int
	Mix       string
	Contender string
	// Percent is, in the open loop, the offered rate as a percentage of
	// the reference's capacity; 0 in the closed loop.
	Percent float64
	// PairOf is, for an open-loop run of the bare proxy, the contender it
	// was run next to; "" otherwise.
	PairOf string
	// LoadAvg is the machine's 1-minute load average when the run began.
	LoadAvg string
	Load    *loadResult
	// CPU time used during the measured part, in clock ticks.
	ContenderTicks, RedisTicks, UpstreamTicks, LoadgenTicks uint64
	// Redis command calls during the measured part (nil: no Redis).
	RedisCmds, RedisScripts *uint64
	// RedisReads is redis-server's socket reads during the measured part
	// (nil: no Redis).
	RedisReads *uint64
	// StoreFallbacks is quotagate's fallback decisions (nil: not quotagate).
	StoreFallbacks *uint64
}

// Row is one contender under one key mix, summed over all rounds.
type Row struct {
	Keys      string `json:"keys"`
	Contender string `json:"contender"`
	Requests  uint64 `json:"requests"`
	// Seconds is the measured time summed over rounds.
	Seconds float64 `json:"seconds"`
	// RPS is Requests / Seconds; RPSRounds is each round's.
	RPS       float64   `json:"rps"`
	RPSRounds []float64 `json:"rps_rounds"`
	// LoadRounds is the machine's 1-minute load average as each round's
	// run began, in the order of RPSRounds.
	LoadRounds []string `json:"loadavg_rounds"`
	// Latency quantiles in microseconds (log-linear histogram, bucket
	// lower bounds: at most 0.8% low).
	P50us  float64 `json:"p50_us"`
	P99us  float64 `json:"p99_us"`
	P999us float64 `json:"p999_us"`
	OK     uint64  `json:"status_200"`
	Limit  uint64  `json:"status_429"`
	Other  uint64  `json:"status_other"`
	// Errors is requests with no HTTP answer (counted in Other as well).
	Errors uint64 `json:"transport_errors"`
	// CPU per request in microseconds: the contender's process group,
	// redis-server (Redis contenders only), the shared upstream and the
	// load generator.
	CPUus      float64  `json:"cpu_us_per_req"`
	RedisCPUus *float64 `json:"redis_cpu_us_per_req,omitempty"`
	UpCPUus    float64  `json:"upstream_cpu_us_per_req"`
	GenCPUus   float64  `json:"loadgen_cpu_us_per_req"`
	// Redis commands per request: every command, including those a
	// script calls; and top-level script calls (EVAL/EVALSHA/FCALL).
	RedisCmds    *float64 `json:"redis_cmds_per_req,omitempty"`
	RedisScripts *float64 `json:"redis_scripts_per_req,omitempty"`
	// RedisReads is redis-server's socket reads per request: 1 for one
	// call per request on its own connection, less when pipelines carry
	// several requests' calls.
	RedisReads *float64 `json:"redis_reads_per_req,omitempty"`
	// StoreFallbacks is quotagate decisions made by on_store_error: open
	// because the store failed or missed its deadline.
	StoreFallbacks *uint64 `json:"store_fallbacks,omitempty"`
	// Ratios to the baselines of the same key mix: throughput, and CPU per
	// request of contender + redis-server. Absent without that baseline.
	RPSvsEvalsha *float64 `json:"rps_vs_evalsha,omitempty"`
	CPUvsEvalsha *float64 `json:"cpu_vs_evalsha,omitempty"`
	RPSvsNginx   *float64 `json:"rps_vs_nginx,omitempty"`
	CPUvsNginx   *float64 `json:"cpu_vs_nginx,omitempty"`
}

// totalCPU is the CPU per request of the contender and the Redis it uses.
func (r *Row) totalCPU() float64 {
	if r.RedisCPUus != nil {
		return r.CPUus + *r.RedisCPUus
	}
	return r.CPUus
}

// Report is the whole output of a run.
type Report struct {
	Command  string            `json:"command"`
	Machine  map[string]string `json:"machine"`
	Settings map[string]string `json:"settings"`
	Notes    []string          `json:"notes"`
	// Rows are the closed-loop runs: every contender's, or in the open
	// mode the reference's capacity runs.
	Rows []Row `json:"rows"`
	// Baseline compares the quotagate contenders with their twins on the
	// -quotagate-baseline binary.
	Baseline []BaselineRatio `json:"baseline,omitempty"`
	// Capacity is, in the open mode, the reference's closed-loop capacity
	// per key mix, which the offered rates are percentages of.
	Capacity []Capacity `json:"capacity,omitempty"`
	// Open is the open-loop runs, per key mix, rate and contender.
	Open []OpenRow `json:"open,omitempty"`
}

// aggregate sums samples into one Row per (mix, contender), in the order
// of mixes then contenders, and fills in the baseline ratios.
func aggregate(samples []sample, mixes, contenders []string) []Row {
	var rows []Row
	for _, mix := range mixes {
		first := len(rows)
		for _, c := range contenders {
			row, ok := aggregateOne(samples, mix, c)
			if ok {
				rows = append(rows, row)
			}
		}
		setRatios(rows[first:])
	}
	return rows
}

func aggregateOne(samples []sample, mix, c string) (Row, bool) {
	r := Row{Keys: mix, Contender: c}
	var h hist
	var elapsed time.Duration
	var cTicks, rTicks, uTicks, gTicks, cmds, scripts, reads, fallbacks uint64
	var hasRedis, hasReads, hasQG, found bool
	for _, s := range samples {
		if s.Mix != mix || s.Contender != c {
			continue
		}
		found = true
		l := s.Load
		r.Requests += l.Requests
		r.OK += l.OK
		r.Limit += l.Limited
		r.Other += l.Other + l.Errors
		r.Errors += l.Errors
		elapsed += l.Elapsed
		if l.Elapsed > 0 {
			r.RPSRounds = append(r.RPSRounds, round1(float64(l.Requests)/l.Elapsed.Seconds()))
			r.LoadRounds = append(r.LoadRounds, s.LoadAvg)
		}
		h.Merge(&l.Latency)
		cTicks += s.ContenderTicks
		rTicks += s.RedisTicks
		uTicks += s.UpstreamTicks
		gTicks += s.LoadgenTicks
		if s.RedisCmds != nil {
			hasRedis = true
			cmds += *s.RedisCmds
			scripts += *s.RedisScripts
		}
		if s.RedisReads != nil {
			hasReads = true
			reads += *s.RedisReads
		}
		if s.StoreFallbacks != nil {
			hasQG = true
			fallbacks += *s.StoreFallbacks
		}
	}
	if !found {
		return r, false
	}
	r.Seconds = round1(elapsed.Seconds()*1000) / 1000
	if elapsed > 0 {
		r.RPS = round1(float64(r.Requests) / elapsed.Seconds())
	}
	us := func(d time.Duration) float64 { return round1(float64(d) / 1e3) }
	r.P50us, r.P99us, r.P999us = us(h.Quantile(0.5)), us(h.Quantile(0.99)), us(h.Quantile(0.999))
	per := func(v float64) float64 {
		if r.Requests == 0 {
			return 0
		}
		return round2(v / float64(r.Requests))
	}
	r.CPUus = per(ticksToMicros(cTicks))
	r.UpCPUus = per(ticksToMicros(uTicks))
	r.GenCPUus = per(ticksToMicros(gTicks))
	if hasRedis {
		rc, cm, sc := per(ticksToMicros(rTicks)), per(float64(cmds)), per(float64(scripts))
		r.RedisCPUus, r.RedisCmds, r.RedisScripts = &rc, &cm, &sc
	}
	if hasReads {
		rd := per(float64(reads))
		r.RedisReads = &rd
	}
	if hasQG {
		r.StoreFallbacks = &fallbacks
	}
	return r, true
}

// setRatios fills the ratio fields of rows (one key mix) against its
// evalsha and nginx rows, when present.
func setRatios(rows []Row) {
	var evalsha, nginx *Row
	for i := range rows {
		switch rows[i].Contender {
		case cEvalsha:
			evalsha = &rows[i]
		case cNginx:
			nginx = &rows[i]
		}
	}
	ratio := func(a, b float64) *float64 {
		if b <= 0 {
			return nil
		}
		v := round2(a / b)
		return &v
	}
	for i := range rows {
		r := &rows[i]
		if evalsha != nil {
			r.RPSvsEvalsha = ratio(r.RPS, evalsha.RPS)
			r.CPUvsEvalsha = ratio(r.totalCPU(), evalsha.totalCPU())
		}
		if nginx != nil {
			r.RPSvsNginx = ratio(r.RPS, nginx.RPS)
			r.CPUvsNginx = ratio(r.totalCPU(), nginx.totalCPU())
		}
	}
}

func round1(v float64) float64 { return float64(int64(v*10+0.5)) / 10 }
func round2(v float64) float64 { return float64(int64(v*100+0.5)) / 100 }

// writeJSON writes rep as indented JSON.
func writeJSON(w io.Writer, rep any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// writeTable writes rep as an aligned text table with its notes.
func writeTable(w io.Writer, rep *Report) error {
	fmt.Fprintf(w, "command: %s\n", rep.Command)
	for _, k := range []string{"cores", "os", "go", "redis", "nginx", "traefik", "quotagate", "baseline", "load"} {
		if v, ok := rep.Machine[k]; ok {
			fmt.Fprintf(w, "%s: %s\n", k, v)
		}
	}
	fmt.Fprintf(w, "settings: %s\n\n", formatSettings(rep.Settings))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "keys\tcontender\treq/s\tp50\tp99\tp99.9\t200\t429\tother\tcpu µs/req\tredis µs/req\tredis cmd/req\treads/req\tfallbacks\tgen µs/req\trps/evalsha\tcpu/evalsha\trps/nginx\tcpu/nginx\t")
	for _, r := range rep.Rows {
		pct := func(n uint64) string {
			if r.Requests == 0 {
				return "-"
			}
			return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(r.Requests))
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t%s\t%s\t%s\t%s\t%.1f\t%s\t%s\t%s\t%s\t\n",
			r.Keys, r.Contender, r.RPS, fmtUS(r.P50us), fmtUS(r.P99us), fmtUS(r.P999us),
			pct(r.OK), pct(r.Limit), pct(r.Other), r.CPUus, optF(r.RedisCPUus, "%.1f"),
			optF(r.RedisCmds, "%.2f"), optF(r.RedisReads, "%.2f"), optU(r.StoreFallbacks), r.GenCPUus,
			optF(r.RPSvsEvalsha, "%.2fx"), optF(r.CPUvsEvalsha, "%.2fx"),
			optF(r.RPSvsNginx, "%.2fx"), optF(r.CPUvsNginx, "%.2fx"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if err := writeBaseline(w, rep); err != nil {
		return err
	}
	if err := writeOpen(w, rep); err != nil {
		return err
	}
	fmt.Fprintln(w, "per round: req/s (1-minute load average when the run began)")
	for _, r := range rep.Rows {
		var parts []string
		for i, v := range r.RPSRounds {
			parts = append(parts, fmt.Sprintf("%.0f (%s)", v, r.LoadRounds[i]))
		}
		fmt.Fprintf(w, "  %-8s %-21s %s\n", r.Keys, r.Contender, strings.Join(parts, "  "))
	}
	fmt.Fprintln(w)
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

func formatSettings(m map[string]string) string {
	var parts []string
	for _, k := range []string{"mode", "conns", "duration", "warmup", "rounds", "open_rounds", "open_rates", "open_ref", "keys", "contenders", "rate", "redis_timeout"} {
		if v, ok := m[k]; ok {
			parts = append(parts, k+"="+v)
		}
	}
	return strings.Join(parts, " ")
}

// fmtUS formats microseconds as µs below 1 ms, else ms.
func fmtUS(us float64) string {
	if us < 1000 {
		return fmt.Sprintf("%.0fµs", us)
	}
	return fmt.Sprintf("%.2fms", us/1000)
}

func optF(v *float64, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}

func optU(v *uint64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(*v)
}
