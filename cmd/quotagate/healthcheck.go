package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"
)

// runHealthcheck asks a running gateway's admin listener whether it is ready
// and exits 0 if it answers 200. It exists for container HEALTHCHECKs in
// images that have no curl or wget.
func runHealthcheck(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "http://127.0.0.1:9090/readyz", "admin endpoint to query")
	timeout := fs.Duration("timeout", 2*time.Second, "how long to wait for the answer")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	client := &http.Client{Timeout: *timeout}
	resp, err := client.Get(*url)
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("healthcheck: %w", err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return &exitError{code: 1, err: fmt.Errorf("healthcheck: %s answered %d", *url, resp.StatusCode)}
	}
	fmt.Fprintln(stdout, "ok")
	return nil
}
