package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/quotagate/quotagate/config"
)

// runValidate loads a config and prints every problem, one per line,
// including those of the descriptor files it names under rls.
func runValidate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "config.yaml", "config file to check")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	cfg, err := config.Load(*path, nil)
	if err != nil {
		var errs config.Errors
		if errors.As(err, &errs) {
			for _, e := range errs {
				fmt.Fprintln(stdout, e.Error())
			}
			return &exitError{code: 1, err: fmt.Errorf("%s: %d problem(s)", *path, len(errs))}
		}
		return &exitError{code: 1, err: err}
	}
	if cfg.RLS.Enabled() {
		if err := checkRLSFiles(cfg); err != nil {
			fmt.Fprintln(stdout, err.Error())
			return &exitError{code: 1, err: fmt.Errorf("%s: rls.config_files has problems", *path)}
		}
	}
	fmt.Fprintf(stdout, "%s: ok\n", *path)
	return nil
}
