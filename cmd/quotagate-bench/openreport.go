package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Capacity is the reference contender's closed-loop throughput on one key
// mix: the median of its rounds, which the open loop's rates are
// percentages of.
type Capacity struct {
	Keys      string    `json:"keys"`
	Contender string    `json:"contender"`
	RPS       float64   `json:"rps"`
	RPSRounds []float64 `json:"rps_rounds"`
}

// OpenRow is one contender at one offered rate under one key mix, summed
// over the open loop's rounds.
type OpenRow struct {
	Keys      string  `json:"keys"`
	Contender string  `json:"contender"`
	Percent   float64 `json:"percent_of_capacity"`
	// Offered is the rate asked for; Achieved, requests answered (or
	// failed) over the time from the schedule's start to the last answer.
	Offered  float64 `json:"offered_rps"`
	Achieved float64 `json:"achieved_rps"`
	Requests uint64  `json:"requests"`
	OK       uint64  `json:"status_200"`
	Limit    uint64  `json:"status_429"`
	// Other is answers of any other status; Errors, requests with no
	// answer; Unsent, requests still due at the drain deadline.
	Other  uint64 `json:"status_other"`
	Errors uint64 `json:"transport_errors"`
	Unsent uint64 `json:"unsent"`
	// Latency quantiles in µs, each request's from its due time.
	P50us  float64 `json:"p50_us"`
	P99us  float64 `json:"p99_us"`
	P999us float64 `json:"p999_us"`
	// Added quantiles: this row's minus those of the runs of the upstream
	// alone made next to this contender's (pooled over the rounds); and
	// the added p99 of each round alone. Absent for the upstream's row.
	AddedP50us     *float64  `json:"added_p50_us,omitempty"`
	AddedP99us     *float64  `json:"added_p99_us,omitempty"`
	AddedP999us    *float64  `json:"added_p999_us,omitempty"`
	AddedP99Rounds []float64 `json:"added_p99_us_rounds,omitempty"`
	// LagP99us is the 99th percentile of how late requests were sent after
	// they were due: the load generator's own delay when no connection was
	// free or it did not get a core in time.
	LagP99us float64 `json:"lag_p99_us"`
	// CPU per request in µs of the contender and of redis-server.
	CPUus      float64  `json:"cpu_us_per_req"`
	RedisCPUus *float64 `json:"redis_cpu_us_per_req,omitempty"`
	// LoadRounds is the 1-minute load average as each round's run began.
	LoadRounds []string `json:"loadavg_rounds"`
}

// aggregateOpen sums the open-loop samples into one OpenRow per (mix,
// percent, contender), in that order, the upstream's reference runs first,
// with each contender's added latencies over the upstream runs made next
// to it.
func aggregateOpen(samples []sample, mixes []string, percents []float64, contenders []string) []OpenRow {
	var rows []OpenRow
	for _, mix := range mixes {
		for _, pct := range percents {
			for _, c := range append([]string{cUpstream}, contenders...) {
				if r, ok := aggregateOpenOne(samples, mix, pct, c); ok {
					if c != cUpstream {
						setAdded(&r, samples)
					}
					rows = append(rows, r)
				}
			}
		}
	}
	return rows
}

func aggregateOpenOne(samples []sample, mix string, pct float64, c string) (OpenRow, bool) {
	r := OpenRow{Keys: mix, Contender: c, Percent: pct}
	var res loadResult
	var elapsed time.Duration
	var offered float64
	var cTicks, rTicks uint64
	var hasRedis, found bool
	for _, s := range samples {
		if s.Mix != mix || s.Contender != c || s.Percent != pct || s.Load == nil {
			continue
		}
		found = true
		res.merge(s.Load)
		elapsed += s.Load.Elapsed
		offered += s.Load.Offered * s.Load.Elapsed.Seconds()
		cTicks += s.ContenderTicks
		rTicks += s.RedisTicks
		hasRedis = hasRedis || s.RedisCmds != nil
		r.LoadRounds = append(r.LoadRounds, s.LoadAvg)
	}
	if !found {
		return r, false
	}
	r.Requests, r.OK, r.Limit, r.Other, r.Errors, r.Unsent = res.Requests, res.OK, res.Limited, res.Other, res.Errors, res.Unsent
	if elapsed > 0 {
		r.Offered = round1(offered / elapsed.Seconds())
		r.Achieved = round1(float64(res.Requests) / elapsed.Seconds())
	}
	us := func(d time.Duration) float64 { return round1(float64(d) / 1e3) }
	r.P50us, r.P99us, r.P999us = us(res.Latency.Quantile(0.5)), us(res.Latency.Quantile(0.99)), us(res.Latency.Quantile(0.999))
	r.LagP99us = us(res.Lag.Quantile(0.99))
	if res.Requests > 0 {
		r.CPUus = round2(ticksToMicros(cTicks) / float64(res.Requests))
		if hasRedis {
			v := round2(ticksToMicros(rTicks) / float64(res.Requests))
			r.RedisCPUus = &v
		}
	}
	return r, true
}

// setAdded fills r's added latencies over the upstream's runs paired
// with r's contender at r's mix and rate, from the rounds that have both:
// pooled over those rounds, and the p99 of each.
func setAdded(r *OpenRow, samples []sample) {
	byRound := map[int][2]*loadResult{}
	for i := range samples {
		s := &samples[i]
		if s.Mix != r.Keys || s.Percent != r.Percent || s.Load == nil {
			continue
		}
		side := 0
		switch {
		case s.Contender == r.Contender:
		case s.Contender == cUpstream && s.PairOf == r.Contender:
			side = 1
		default:
			continue
		}
		p := byRound[s.Round]
		p[side] = s.Load
		byRound[s.Round] = p
	}
	var rounds []int
	var mine, up loadResult
	for rd, p := range byRound {
		if p[0] != nil && p[1] != nil {
			rounds = append(rounds, rd)
			mine.merge(p[0])
			up.merge(p[1])
		}
	}
	if len(rounds) == 0 {
		return
	}
	minus := func(a, b *loadResult, q float64) *float64 {
		v := round1(float64(a.Latency.Quantile(q)-b.Latency.Quantile(q)) / 1e3)
		return &v
	}
	r.AddedP50us, r.AddedP99us, r.AddedP999us = minus(&mine, &up, 0.5), minus(&mine, &up, 0.99), minus(&mine, &up, 0.999)
	slices.Sort(rounds)
	for _, rd := range rounds {
		p := byRound[rd]
		r.AddedP99Rounds = append(r.AddedP99Rounds, *minus(p[0], p[1], 0.99))
	}
}

// writeOpen writes the open-loop capacity and table of rep, if it has them.
func writeOpen(w io.Writer, rep *Report) error {
	if len(rep.Open) == 0 {
		return nil
	}
	for _, c := range rep.Capacity {
		fmt.Fprintf(w, "capacity: %s keys=%s %.0f req/s closed loop (median of rounds: %s)\n", c.Contender, c.Keys, c.RPS, joinF(c.RPSRounds, "%.0f"))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "open loop: constant offered rate, latency from each request's due time; +p50/+p99/+p99.9: over the upstream alone at the same rate, run next to each contender")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "keys\trate\tcontender\toffered\tachieved\tp50\tp99\tp99.9\t+p50\t+p99\t+p99.9\t+p99 rounds\terrors\tunsent\tlag p99\tcpu µs/req\tredis µs/req\tload\t")
	for _, r := range rep.Open {
		var rounds []string
		for _, v := range r.AddedP99Rounds {
			rounds = append(rounds, fmtAdded(&v))
		}
		fmt.Fprintf(tw, "%s\t%g%%\t%s\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%.1f\t%s\t%s\t\n",
			r.Keys, r.Percent, r.Contender, r.Offered, r.Achieved, fmtUS(r.P50us), fmtUS(r.P99us), fmtUS(r.P999us),
			fmtAdded(r.AddedP50us), fmtAdded(r.AddedP99us), fmtAdded(r.AddedP999us), strings.Join(rounds, " "),
			r.Other+r.Errors, r.Unsent, fmtUS(r.LagP99us), r.CPUus, optF(r.RedisCPUus, "%.1f"), strings.Join(r.LoadRounds, " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return nil
}

// fmtAdded formats an added latency in µs with its sign, or "-".
func fmtAdded(us *float64) string {
	switch {
	case us == nil:
		return "-"
	case *us < 0:
		return "-" + fmtUS(-*us)
	}
	return "+" + fmtUS(*us)
}
