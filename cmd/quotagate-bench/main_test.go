package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary stand in for the bench binary when the
// bench re-executes itself to run a hidden subcommand.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" && len(os.Args) > 1 && isChildCommand(os.Args[1]) {
		if err := runChild(os.Args[1], os.Args[2:], os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestRunEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and builds quotagate")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	jsonPath := filepath.Join(t.TempDir(), "report.json")
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"-d", "300ms", "-warmup", "50ms", "-c", "4", "-rounds", "1", "-keys", "uniform",
		"-contenders", "bare,quotagate-memory", "-json", jsonPath}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("report JSON: %v\n%s", err, b)
	}
	if len(rep.Rows) != 2 {
		t.Fatalf("got %d rows, want 2 (bare, quotagate-memory):\n%s", len(rep.Rows), b)
	}
	for i, want := range []string{cBare, cQGMemory} {
		r := rep.Rows[i]
		if r.Contender != want || r.Keys != mixUniform {
			t.Errorf("row %d: %s/%s, want %s/uniform", i, r.Contender, r.Keys, want)
		}
		if r.Requests == 0 || r.RPS <= 0 || r.OK == 0 {
			t.Errorf("%s: requests %d, rps %v, 200s %d; want all > 0", r.Contender, r.Requests, r.RPS, r.OK)
		}
		if r.OK+r.Limit+r.Other != r.Requests {
			t.Errorf("%s: status mix %d+%d+%d != %d requests", r.Contender, r.OK, r.Limit, r.Other, r.Requests)
		}
		if r.P50us <= 0 || r.P50us > r.P99us || r.P99us > r.P999us {
			t.Errorf("%s: quantiles p50 %v p99 %v p99.9 %v not positive and ordered", r.Contender, r.P50us, r.P99us, r.P999us)
		}
		if r.RPSvsEvalsha != nil || r.RPSvsNginx != nil {
			t.Errorf("%s: ratio to a baseline that did not run", r.Contender)
		}
	}
	if fb := rep.Rows[1].StoreFallbacks; fb == nil || *fb != 0 {
		t.Errorf("quotagate-memory store fallbacks = %v, want 0", fb)
	}
	table := stdout.String()
	for _, s := range []string{"req/s", "bare", "quotagate-memory", "note: the machine has"} {
		if !strings.Contains(table, s) {
			t.Errorf("table lacks %q:\n%s", s, table)
		}
	}
}

func TestParseFlagsRejectsBadValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-c", "0"}, "-c"},
		{[]string{"-d", "0s"}, "-d"},
		{[]string{"-rounds", "0"}, "-rounds"},
		{[]string{"-keys", "pareto"}, "-keys"},
		{[]string{"-keys", "one,pareto"}, "-keys"},
		{[]string{"-keys", ", "}, "-keys"},
		{[]string{"-contenders", "bare,envoy"}, "-contenders"},
		{[]string{"-contenders", ","}, "-contenders"},
		{[]string{"-redis-timeout", "2s"}, "-redis-timeout"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		_, err := parseFlags(tc.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFlags(%q) = %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
	o, err := parseFlags([]string{"-keys", "all", "-contenders", "nginx, bare,nginx"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.mixes, ",") != "one,uniform,zipf" || strings.Join(o.contenders, ",") != "nginx,bare" {
		t.Errorf("mixes %v contenders %v", o.mixes, o.contenders)
	}
	o, err = parseFlags([]string{"-keys", "uniform, one,uniform"}, &bytes.Buffer{})
	if err != nil || strings.Join(o.mixes, ",") != "uniform,one" {
		t.Errorf("-keys uniform, one,uniform: mixes %v, %v", o.mixes, err)
	}
}

func TestBaselineAndOpenEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and builds quotagate")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin, err := buildQuotagate(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	report := func(args ...string) *Report {
		t.Helper()
		jsonPath := filepath.Join(t.TempDir(), "report.json")
		var stdout, stderr bytes.Buffer
		args = append([]string{"-d", "300ms", "-warmup", "50ms", "-c", "4", "-keys", "one",
			"-contenders", "bare,quotagate-memory", "-quotagate", bin, "-quotagate-baseline", bin, "-json", jsonPath}, args...)
		if err := run(ctx, args, &stdout, &stderr); err != nil {
			t.Fatalf("run %q: %v\nstderr:\n%s", args, err, stderr.String())
		}
		b, err := os.ReadFile(jsonPath)
		if err != nil {
			t.Fatal(err)
		}
		var rep Report
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatalf("report JSON: %v\n%s", err, b)
		}
		return &rep
	}

	// The same binary on both sides: one ratio per round, around 1.
	rep := report("-rounds", "2")
	if len(rep.Rows) != 3 || rep.Rows[2].Contender != cQGMemory+baseSuffix {
		t.Fatalf("rows %+v, want bare, quotagate-memory and its twin", rep.Rows)
	}
	if len(rep.Baseline) != 1 {
		t.Fatalf("baseline %+v, want one ratio", rep.Baseline)
	}
	b := rep.Baseline[0]
	if b.Contender != cQGMemory || b.Rounds != 2 || b.RPS.Median <= 0 || b.CPU.Median <= 0 || b.RPS.Min > b.RPS.Max {
		t.Errorf("baseline ratio %+v", b)
	}

	rep = report("-mode", "open", "-rounds", "1", "-open-rates", "20,40")
	if len(rep.Capacity) != 1 || rep.Capacity[0].Contender != cQGMemory || rep.Capacity[0].RPS <= 0 {
		t.Fatalf("capacity %+v, want quotagate-memory's (-open-ref defaults to the first quotagate contender)", rep.Capacity)
	}
	if len(rep.Rows) != 1 || len(rep.Open) != 8 || rep.Open[0].Contender != cUpstream {
		t.Fatalf("%d closed rows, %d open rows; want 1 (the capacity run) and 2 rates x (the upstream + 3 contenders)", len(rep.Rows), len(rep.Open))
	}
	for _, r := range rep.Open {
		want := rep.Capacity[0].RPS * r.Percent / 100
		if r.Offered < want*0.99 || r.Offered > want*1.01 || r.Requests == 0 || r.OK == 0 || (r.AddedP99us == nil) != (r.Contender == cUpstream) {
			t.Errorf("%s at %v%%: offered %v (want %v), requests %d, 200s %d, added p99 %v",
				r.Contender, r.Percent, r.Offered, want, r.Requests, r.OK, r.AddedP99us)
		}
	}
}
