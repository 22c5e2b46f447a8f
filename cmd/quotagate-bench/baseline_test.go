package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSpreadOf(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want spread
	}{
		{nil, spread{}},
		{[]float64{1.2}, spread{1.2, 1.2, 1.2}},
		{[]float64{1.10, 0.90, 1.00}, spread{1.00, 0.90, 1.10}},
		{[]float64{4, 1, 3, 2}, spread{2.5, 1, 4}},
		{[]float64{0.97, 1.30, 0.95, 0.96, 0.99}, spread{0.97, 0.95, 1.30}},
	} {
		in := slices.Clone(tc.in)
		if got := spreadOf(tc.in); got != tc.want {
			t.Errorf("spreadOf(%v) = %+v, want %+v", tc.in, got, tc.want)
		}
		if !slices.Equal(in, tc.in) {
			t.Errorf("spreadOf reordered its argument: %v", tc.in)
		}
	}
	if s := (spread{1.02, 0.97, 1.05}).String(); s != "1.020x [0.970x–1.050x]" {
		t.Errorf("String = %q", s)
	}
}

// baseSample is one round of one contender: reqs requests in one second,
// with the contender's and redis-server's CPU in ticks.
func baseSample(c, mix string, round int, reqs, cTicks, rTicks uint64) sample {
	l := &loadResult{Elapsed: time.Second, Requests: reqs, OK: reqs}
	l.Latency.Record(time.Millisecond)
	return sample{Round: round, Mix: mix, Contender: c, Load: l, ContenderTicks: cTicks, RedisTicks: rTicks}
}

func TestBaselineRatiosPairRoundsAndTakeTheMedian(t *testing.T) {
	tw := cQGRedis + baseSuffix
	samples := []sample{
		// Round 1: main 1100 req/s at 20 ticks / 1100 req; base 1000 at 20 / 1000.
		baseSample(cQGRedis, mixOne, 1, 1100, 15, 5), baseSample(tw, mixOne, 1, 1000, 15, 5),
		// Round 2: the machine got slower for both; the ratio is what counts.
		baseSample(tw, mixOne, 2, 500, 10, 0), baseSample(cQGRedis, mixOne, 2, 450, 10, 0),
		// Round 3.
		baseSample(cQGRedis, mixOne, 3, 1000, 12, 0), baseSample(tw, mixOne, 3, 1000, 10, 0),
		// uniform: base never ran in round 2, so that round is left out.
		baseSample(cQGRedis, mixUniform, 1, 800, 8, 0), baseSample(tw, mixUniform, 1, 1000, 10, 0),
		baseSample(cQGRedis, mixUniform, 2, 800, 8, 0),
		// A contender without a twin gets no ratio.
		baseSample(cQGMemory, mixOne, 1, 2000, 10, 0),
		baseSample(cBare, mixOne, 1, 3000, 10, 0),
	}
	got := baselineRatios(samples, []string{mixOne, mixUniform}, []string{cBare, cQGMemory, cQGRedis, tw})
	if len(got) != 2 {
		t.Fatalf("got %d ratios, want 2 (redis on one and on uniform): %+v", len(got), got)
	}
	one := got[0]
	if one.Keys != mixOne || one.Contender != cQGRedis || one.Rounds != 3 {
		t.Fatalf("first ratio: %+v", one)
	}
	// req/s: 1.1, 0.9, 1.0; CPU per request: (20/1100)/(20/1000) = 0.909,
	// (10/450)/(10/500) = 1.111, (12/1000)/(10/1000) = 1.2.
	if !slices.Equal(one.RPSRounds, []float64{1.1, 0.9, 1.0}) || one.RPS != (spread{1.0, 0.9, 1.1}) {
		t.Errorf("req/s ratios %v, %+v", one.RPSRounds, one.RPS)
	}
	if !slices.Equal(one.CPURounds, []float64{0.909, 1.111, 1.2}) || one.CPU != (spread{1.111, 0.909, 1.2}) {
		t.Errorf("cpu ratios %v, %+v", one.CPURounds, one.CPU)
	}
	if one.Holds {
		t.Error("CPU median 1.111 is more than 5% above the baseline's, but the ratio holds")
	}
	uni := got[1]
	if uni.Rounds != 1 || uni.RPS.Median != 0.8 || uni.CPU.Median != 1 || uni.Holds {
		t.Errorf("uniform: %+v; want one round, 0.8x req/s, 1x CPU, not holding", uni)
	}

	// At the edges of the tolerance the ratio holds.
	edge := baselineRatios([]sample{
		baseSample(cQGLease, mixOne, 1, 950, 105, 0), baseSample(cQGLease+baseSuffix, mixOne, 1, 1000, 100, 0),
	}, []string{mixOne}, []string{cQGLease, cQGLease + baseSuffix})
	if len(edge) != 1 || edge[0].RPS.Median != 0.95 || edge[0].CPU.Median != 1.105 || edge[0].Holds {
		t.Errorf("edge: %+v", edge)
	}
	edge = baselineRatios([]sample{
		baseSample(cQGLease, mixOne, 1, 950, 99, 0), baseSample(cQGLease+baseSuffix, mixOne, 1, 1000, 100, 0),
	}, []string{mixOne}, []string{cQGLease, cQGLease + baseSuffix})
	if len(edge) != 1 || !edge[0].Holds {
		t.Errorf("0.95x req/s at 1.042x CPU does not hold: %+v", edge)
	}

	var b bytes.Buffer
	if err := writeBaseline(&b, &Report{Machine: map[string]string{"baseline": "/tmp/qg-base"}, Baseline: got}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"/tmp/qg-base", "1.000x [0.900x–1.100x]", "1.111x [0.909x–1.200x]", "SLOWER than 5%", "1.100 0.900 1.000"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("baseline table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestTwinsAndRoundOrder(t *testing.T) {
	got := withTwins([]string{cBare, cQGRedis, cNginx, cQGLease, cQGLease + baseSuffix, cQGMemory + baseSuffix})
	want := []string{cBare, cQGRedis, cQGRedis + baseSuffix, cNginx, cQGLease, cQGLease + baseSuffix, cQGMemory + baseSuffix}
	if !slices.Equal(got, want) {
		t.Errorf("withTwins = %v, want %v", got, want)
	}
	if variant(cQGRedis+baseSuffix) != cQGRedis || variant(cBare+baseSuffix) != cBare+baseSuffix || onBaseline(cQGRedis) {
		t.Error("variant/onBaseline")
	}

	cs := []string{cBare, cQGRedis, cQGRedis + baseSuffix, cNginx}
	for round, want := range [][]string{
		{cBare, cQGRedis, cQGRedis + baseSuffix, cNginx},
		{cQGRedis + baseSuffix, cQGRedis, cNginx, cBare},
		{cNginx, cBare, cQGRedis, cQGRedis + baseSuffix},
		{cBare, cQGRedis + baseSuffix, cQGRedis, cNginx},
	} {
		if got := roundOrder(cs, round); !slices.Equal(got, want) {
			t.Errorf("round %d: %v, want %v", round, got, want)
		}
	}
	// Without twins it is the plain rotation.
	if got := roundOrder([]string{"a", "b", "c"}, 4); !slices.Equal(got, []string{"b", "c", "a"}) {
		t.Errorf("rotation: %v", got)
	}
}

func TestParseFlagsBaselineAndOpen(t *testing.T) {
	o, err := parseFlags([]string{"-quotagate-baseline", "/tmp/b", "-contenders", "bare,quotagate-redis,nginx"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.contenders, ",") != "bare,quotagate-redis,quotagate-redis@base,nginx" {
		t.Errorf("contenders %v", o.contenders)
	}
	o, err = parseFlags([]string{"-mode", "open", "-open-rates", "80, 25,80", "-contenders", "bare,quotagate-redis"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.openRates, []float64{80, 25}) || o.openRef != cQGRedis || o.openRounds != 1 {
		t.Errorf("open: rates %v ref %q rounds %d", o.openRates, o.openRef, o.openRounds)
	}
	o, err = parseFlags([]string{"-mode", "open"}, &bytes.Buffer{})
	if err != nil || o.openRef != cQGLease || !slices.Equal(o.openRates, []float64{25, 50, 80}) {
		t.Errorf("open defaults: %v %+v", err, o)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-contenders", "quotagate-redis@base"}, "-quotagate-baseline"},
		{[]string{"-quotagate-baseline", "/tmp/b", "-contenders", "bare,nginx"}, "-quotagate-baseline"},
		{[]string{"-mode", "open", "-open-rates", "0"}, "-open-rates"},
		{[]string{"-mode", "open", "-open-rates", "fast"}, "-open-rates"},
		{[]string{"-mode", "open", "-open-rates", ","}, "-open-rates"},
		{[]string{"-mode", "open", "-open-rounds", "0"}, "-open-rounds"},
		{[]string{"-mode", "open", "-contenders", "bare,nginx"}, "-open-ref"},
		{[]string{"-mode", "open", "-contenders", "bare,quotagate-redis", "-open-ref", "quotagate-lease"}, "-open-ref"},
		{[]string{"-mode", "closed"}, "-mode"},
	} {
		if _, err := parseFlags(tc.args, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFlags(%q) = %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}
