package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/gateway"
)

// runExplain prints the route, caller, tier, limits and store keys that a
// request would get, without sending it.
func runExplain(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "config.yaml", "config file")
	method := fs.String("method", "GET", "request method")
	reqPath := fs.String("path", "", "request path, e.g. /v1/transfers/42")
	key := fs.String("key", "", "credential: an API key or a JWT (empty: anonymous caller from 127.0.0.1)")
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
	ex, err := gateway.Explain(cfg, strings.ToUpper(*method), *reqPath, *key, os.LookupEnv)
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("explain: %w", err)}
	}
	fmt.Fprintf(stdout, "route:   %s (%s)\n", ex.Route, ex.Template)
	fmt.Fprintf(stdout, "caller:  %s (%s)\n", ex.Caller, ex.Kind)
	fmt.Fprintf(stdout, "tier:    %s\n", ex.Tier)
	fmt.Fprintf(stdout, "cost:    %d\n", ex.Cost)
	if st := ex.Settle; st != nil {
		if st.ReserveFrom != "" {
			fmt.Fprintf(stdout, "reserve: %d unless the request says otherwise (%s), at most %d\n", ex.Cost, st.ReserveFrom, st.Max)
		}
		if st.SettleFrom != "" {
			fmt.Fprintf(stdout, "settle:  %s from the response (%s)\n", strings.Join(st.Policies, ", "), st.SettleFrom)
		}
	}
	if ex.Local != nil {
		fmt.Fprintf(stdout, "local:   rate %d per %s, burst %d (stage 1, this instance)\n", ex.Local.Rate, ex.Local.Per, ex.Local.Burst)
	} else {
		fmt.Fprintln(stdout, "local:   none")
	}
	if len(ex.Policies) == 0 {
		fmt.Fprintln(stdout, "policies: none (stage 1 only)")
		return nil
	}
	fmt.Fprintln(stdout, "policies:")
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  NAME\tSCOPE\tALGORITHM\tLIMIT\tON_STORE_ERROR\tSHADOW\tKEY")
	for _, p := range ex.Policies {
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
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%t\t%s\n", p.Name, p.Scope, p.Algorithm, limit, p.OnStoreError, p.Shadow, p.Key)
	}
	return tw.Flush()
}
