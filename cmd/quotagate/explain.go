package main

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/gateway"
)

// reserveWhy explains Explanation.ReserveWhy.
var reserveWhy = map[string]string{
	"cost":        "the route's fixed cost",
	"stated":      "what the request states",
	"reserve":     "the route's reserve: the request states nothing where one is read",
	"max":         "the route's max: the body does not state a reservation the gateway can read, or there is no body",
	"over_budget": "the route's max: the gateway's body buffer budget is spent",
}

// runExplain prints the route, caller, tier, limits and store keys that a
// request would get, and what it would reserve, without sending it.
func runExplain(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "config.yaml", "config file")
	method := fs.String("method", "GET", "request method")
	reqPath := fs.String("path", "", "request path, e.g. /v1/transfers/42")
	key := fs.String("key", "", "credential: an API key or a JWT (empty: anonymous caller from 127.0.0.1)")
	bodyFile := fs.String("body", "", "file holding the request body (- for standard input; empty: no body)")
	header := http.Header{}
	fs.Func("header", "a request header `K:V` (repeatable), e.g. -header 'Content-Type: application/json'", func(kv string) error {
		k, v, ok := strings.Cut(kv, ":")
		if !ok || strings.TrimSpace(k) == "" {
			return fmt.Errorf("want K:V, got %q", kv)
		}
		header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		return nil
	})
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if *reqPath == "" {
		return usageErr("explain: -path is required")
	}
	cfg, err := config.Load(*path, nil)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	req := gateway.ExplainRequest{Method: strings.ToUpper(*method), Path: *reqPath, Credential: *key, Header: header}
	if *bodyFile != "" {
		if *bodyFile == "-" {
			req.Body, err = io.ReadAll(os.Stdin)
		} else {
			req.Body, err = os.ReadFile(*bodyFile)
		}
		if err != nil {
			return &exitError{code: 1, err: fmt.Errorf("explain: -body: %w", err)}
		}
	}
	ex, err := gateway.Explain(cfg, req, os.LookupEnv)
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("explain: %w", err)}
	}
	fmt.Fprintf(stdout, "route:   %s (%s)\n", ex.Route, ex.Template)
	fmt.Fprintf(stdout, "caller:  %s (%s)\n", ex.Caller, ex.Kind)
	fmt.Fprintf(stdout, "tier:    %s\n", ex.Tier)
	if ex.Refusal != "" {
		fmt.Fprintf(stdout, "refused: %s\n", ex.Refusal)
	} else {
		fmt.Fprintf(stdout, "cost:    %d (%s)\n", ex.Reserve, reserveWhy[ex.ReserveWhy])
	}
	if st := ex.Settle; st != nil {
		switch {
		case strings.HasPrefix(st.ReserveFrom, "json"):
			fmt.Fprintf(stdout, "reserve: from %s, at most %d; %d when the body does not state it (or there is none)\n", st.ReserveFrom, st.Max, st.Max)
		case st.ReserveFrom != "":
			fmt.Fprintf(stdout, "reserve: from %s, at most %d; %d when the request does not state it\n", st.ReserveFrom, st.Max, ex.Cost)
		}
		if st.SettleFrom != "" {
			fmt.Fprintf(stdout, "settle:  %s from the response (%s)\n", strings.Join(st.Policies, ", "), st.SettleFrom)
		}
	}
	if ex.Dimension != "" {
		fmt.Fprintf(stdout, "by:      %s\n", ex.Dimension)
	}
	if ex.Settle == nil {
		for _, m := range ex.Measures {
			printMeasure(stdout, m, ex.Refusal == "")
		}
	}
	if ex.Local != nil {
		fmt.Fprintf(stdout, "local:   rate %d per %s, burst %d (stage 1, this instance)\n", ex.Local.Rate, ex.Local.Per, ex.Local.Burst)
	} else {
		fmt.Fprintln(stdout, "local:   none")
	}
	if len(ex.Upstreams) > 0 {
		fmt.Fprintln(stdout, "upstreams: in order; a request one denies is decided against the next, nothing taken from it")
		for i, c := range ex.Upstreams {
			fmt.Fprintf(stdout, "  %d. %s: %s\n", i+1, c.Upstream, candidateReserve(c))
			if err := printPolicies(stdout, "     ", c.Policies); err != nil {
				return err
			}
		}
		return nil
	}
	if len(ex.Policies) == 0 {
		fmt.Fprintln(stdout, "policies: none (stage 1 only)")
		return nil
	}
	fmt.Fprintln(stdout, "policies:")
	return printPolicies(stdout, "  ", ex.Policies)
}

// candidateReserve says what a request forwarded to upstream c reserves
// there: "reserves tokens 1100, usd 11000; holds 1 slot".
func candidateReserve(c gateway.CandidateExplained) string {
	if len(c.Policies) == 0 {
		return "no policies: admits every request"
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(c.Reserve)) {
		parts = append(parts, fmt.Sprintf("%s %d", name, c.Reserve[name]))
	}
	out := "reserves " + strings.Join(parts, ", ")
	if len(parts) == 0 {
		out = "reserves no measure"
	}
	switch {
	case c.Slots == 1:
		out += "; holds 1 slot"
	case c.Slots > 1:
		out += fmt.Sprintf("; holds %d slots", c.Slots)
	}
	return out
}

// printPolicies prints the table of policies ps, each line after indent.
func printPolicies(stdout io.Writer, indent string, ps []gateway.PolicyExplained) error {
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, indent+"NAME\tCOST\tSCOPE\tALGORITHM\tLIMIT\tON_STORE_ERROR\tSHADOW\tKEY")
	for _, p := range ps {
		limit := fmt.Sprintf("%d/%s", p.Rate, p.Per)
		if p.Calendar != "" {
			limit = fmt.Sprintf("%d per %s", p.Rate, p.Calendar)
		}
		if p.Burst > 0 {
			limit += fmt.Sprintf(" burst %d", p.Burst)
		}
		if p.Max > 0 {
			limit = fmt.Sprintf("%d in flight, slot_ttl %s", p.Max, p.Per)
		}
		cost := strconv.FormatInt(p.Cost, 10)
		switch {
		case p.Measure != "" && p.Settled:
			cost += " " + p.Measure + ", settled"
		case p.Measure != "":
			cost += " " + p.Measure
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%s\t%t\t%s\n", indent, p.Name, cost, p.Scope, p.Algorithm, limit, p.OnStoreError, p.Shadow, p.Key)
	}
	return tw.Flush()
}

// printMeasure prints a measure of the route and, when the request is not
// refused (decided), what it reserves of it.
func printMeasure(w io.Writer, m gateway.MeasureExplained, decided bool) {
	line := "measure: " + m.Name
	if decided {
		line += fmt.Sprintf(" %d (%s)", m.Reserve, measureWhy[m.ReserveWhy])
	}
	if m.ReserveFrom != "" {
		line += fmt.Sprintf("; reserved from %s, at most %d", m.ReserveFrom, m.Max)
	}
	if m.SettleFrom != "" {
		line += "; settled from the response (" + m.SettleFrom + ")"
	}
	fmt.Fprintln(w, line)
}

// measureWhy says, for a measure, what reserveWhy says for a route's cost.
var measureWhy = map[string]string{
	"stated":      "what the request states",
	"reserve":     "its reserve: the request states nothing where one is read",
	"max":         "its max: the body does not state a reservation the gateway can read, or there is no body",
	"over_budget": "its max: the gateway's body buffer budget is spent",
	"bound":       "its settle on the request's token bounds",
}
