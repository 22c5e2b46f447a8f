package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// A baseline is a second quotagate binary (-quotagate-baseline), run as
// contenders of its own beside the main binary's, with the same settings:
// each quotagate contender X gets a twin X@base. A twin runs next to its
// main contender in every round, the two taking turns at going first, so
// that whatever the machine does to one, it does to the other; the report
// gives per key mix the ratio main/base of each round and their median.

// baseSuffix marks a contender run on the baseline binary.
const baseSuffix = "@base"

// holdTolerance is how much slower than the baseline, in throughput or in
// CPU per request, the main binary may be for a ratio to hold (issue 29:
// "not more than 5 % slower").
const holdTolerance = 0.05

// isQuotagate reports whether c is a quotagate contender, on either binary.
func isQuotagate(c string) bool {
	switch strings.TrimSuffix(c, baseSuffix) {
	case cQGMemory, cQGRedis, cQGLease:
		return true
	}
	return false
}

// variant returns the contender c runs as, without the baseline mark: the
// key of contenderInfo and of how it is started.
func variant(c string) string {
	if v, ok := strings.CutSuffix(c, baseSuffix); ok && isQuotagate(v) {
		return v
	}
	return c
}

// onBaseline reports whether c runs on the baseline binary.
func onBaseline(c string) bool { return variant(c) != c }

// withTwins returns contenders with X@base inserted after every quotagate
// contender X that lacks it, keeping the order otherwise.
func withTwins(contenders []string) []string {
	var out []string
	for _, c := range contenders {
		if onBaseline(c) {
			if !slices.Contains(contenders, variant(c)) && !slices.Contains(out, c) {
				out = append(out, c) // alone: no main contender to follow
			}
			continue // else placed after its main contender below
		}
		out = append(out, c)
		if isQuotagate(c) && !slices.Contains(out, c+baseSuffix) {
			out = append(out, c+baseSuffix)
		}
	}
	return out
}

// roundOrder is the order contenders run in round (from 0): the list
// rotated by the round, so that no contender always runs first (after the
// machine idled) or last, with each X@base kept next to its X, after it
// in even rounds and before it in odd ones.
func roundOrder(contenders []string, round int) []string {
	var units [][]string
	for _, c := range contenders {
		if onBaseline(c) && slices.Contains(contenders, variant(c)) {
			continue
		}
		u := []string{c}
		if tw := c + baseSuffix; isQuotagate(c) && slices.Contains(contenders, tw) {
			u = append(u, tw)
			if round%2 == 1 {
				u[0], u[1] = u[1], u[0]
			}
		}
		units = append(units, u)
	}
	var out []string
	for i := range units {
		out = append(out, units[(i+round)%len(units)]...)
	}
	return out
}

// BaselineRatio compares a quotagate contender with its twin on the
// baseline binary under one key mix: per round, main's throughput over
// base's and main's CPU per request (quotagate + redis-server) over
// base's; with the median of the rounds and the lowest and highest round.
type BaselineRatio struct {
	Keys      string    `json:"keys"`
	Contender string    `json:"contender"`
	Rounds    int       `json:"rounds"`
	RPSRounds []float64 `json:"rps_ratio_rounds"`
	RPS       spread    `json:"rps_ratio"`
	CPURounds []float64 `json:"cpu_ratio_rounds"`
	CPU       spread    `json:"cpu_ratio"`
	// Holds is whether main is at most holdTolerance slower than base in
	// the medians: throughput ratio >= 0.95 and CPU ratio <= 1.05.
	Holds bool `json:"holds"`
}

// spread is the median of some values with their smallest and largest.
type spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// spreadOf returns the median, smallest and largest of vs (the mean of the
// middle two when there is an even count); the zero spread for none.
func spreadOf(vs []float64) spread {
	if len(vs) == 0 {
		return spread{}
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{Median: m, Min: s[0], Max: s[len(s)-1]}
}

// String formats s as "1.02x [0.97x–1.05x]".
func (s spread) String() string {
	return fmt.Sprintf("%.3fx [%.3fx–%.3fx]", s.Median, s.Min, s.Max)
}

// roundRate is a sample's throughput and CPU per request of the
// contender and its redis-server, in ticks per request.
func roundRate(s *sample) (rps, cpu float64, ok bool) {
	l := s.Load
	if l == nil || l.Requests == 0 || l.Elapsed <= 0 {
		return 0, 0, false
	}
	return float64(l.Requests) / l.Elapsed.Seconds(), float64(s.ContenderTicks+s.RedisTicks) / float64(l.Requests), true
}

// baselineRatios pairs every quotagate contender's samples with its
// twin's of the same round and key mix, in the order of mixes then
// contenders. A round where either side measured nothing is left out; a
// contender without a twin gets no ratio.
func baselineRatios(samples []sample, mixes, contenders []string) []BaselineRatio {
	type key struct {
		round     int
		mix, name string
	}
	byKey := map[key]*sample{}
	for i := range samples {
		s := &samples[i]
		byKey[key{s.Round, s.Mix, s.Contender}] = s
	}
	var out []BaselineRatio
	for _, mix := range mixes {
		for _, c := range contenders {
			if !isQuotagate(c) || onBaseline(c) || !slices.Contains(contenders, c+baseSuffix) {
				continue
			}
			br := BaselineRatio{Keys: mix, Contender: c}
			var rounds []int
			for _, s := range samples {
				if s.Mix == mix && s.Contender == c && !slices.Contains(rounds, s.Round) {
					rounds = append(rounds, s.Round)
				}
			}
			slices.Sort(rounds)
			for _, r := range rounds {
				m, b := byKey[key{r, mix, c}], byKey[key{r, mix, c + baseSuffix}]
				if b == nil {
					continue
				}
				mr, mc, ok1 := roundRate(m)
				br0, bc, ok2 := roundRate(b)
				if !ok1 || !ok2 || br0 <= 0 || bc <= 0 {
					continue
				}
				br.RPSRounds = append(br.RPSRounds, round3(mr/br0))
				br.CPURounds = append(br.CPURounds, round3(mc/bc))
			}
			if br.Rounds = len(br.RPSRounds); br.Rounds == 0 {
				continue
			}
			br.RPS, br.CPU = spreadOf(br.RPSRounds), spreadOf(br.CPURounds)
			const eps = 1e-9 // 0.95 read as 0.95, whatever its rounding
			br.Holds = br.RPS.Median >= 1-holdTolerance-eps && br.CPU.Median <= 1+holdTolerance+eps
			out = append(out, br)
		}
	}
	return out
}

func round3(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }

// writeBaseline writes the baseline comparison of rep, if it has one.
func writeBaseline(w io.Writer, rep *Report) error {
	if len(rep.Baseline) == 0 {
		return nil
	}
	fmt.Fprintf(w, "against the baseline binary (%s): main/base per round, paired within the round; median [lowest–highest round]\n", rep.Machine["baseline"])
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  keys\tcontender\trounds\treq/s main/base\tcpu/req main/base\trounds req/s\trounds cpu/req\tverdict")
	for _, b := range rep.Baseline {
		verdict := "holds (within 5%)"
		if !b.Holds {
			verdict = "SLOWER than 5%"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", b.Keys, b.Contender, b.Rounds, b.RPS, b.CPU,
			joinF(b.RPSRounds, "%.3f"), joinF(b.CPURounds, "%.3f"), verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return nil
}

// joinF formats vs with format, space-separated.
func joinF(vs []float64, format string) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprintf(format, v)
	}
	return strings.Join(parts, " ")
}
