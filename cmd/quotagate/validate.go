package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/quotagate/quotagate/config"
)

// runValidate loads a config and prints every problem, one per line.
func runValidate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "config.yaml", "config file to check")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if _, err := config.Load(*path, nil); err != nil {
		var errs config.Errors
		if errors.As(err, &errs) {
			for _, e := range errs {
				fmt.Fprintln(stdout, e.Error())
			}
			return &exitError{code: 1, err: fmt.Errorf("%s: %d problem(s)", *path, len(errs))}
		}
		return &exitError{code: 1, err: err}
	}
	fmt.Fprintf(stdout, "%s: ok\n", *path)
	return nil
}
