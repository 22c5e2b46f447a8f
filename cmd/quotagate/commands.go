package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/quotagate/quotagate/telemetry"
)

// command is one row of the command table: the help text and the
// unknown-command error are both derived from it, so they cannot drift.
type command struct {
	// name is the first argument that selects the command; "" is the
	// gateway itself, run when the first argument is a flag or absent.
	name string
	// synopsis follows "quotagate" in the help text.
	synopsis string
	// summary says what the command does, in a few words.
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands is the command table, in the order the help text lists it.
func commands() []command {
	return []command{
		{"", "[-config FILE] [-watch-interval D]", "run the gateway", runServe},
		{"validate", "validate [-config FILE]", "check a config, print every problem with its field path", noCtx(runValidate)},
		{"explain", "explain [-config FILE] -method M -path P [-key K] [-header K:V] [-body FILE]", "show the route, caller, reservation, limits and keys a request would get", noCtx(runExplain)},
		{"healthcheck", "healthcheck [-url URL] [-timeout D]", "exit 0 when a gateway's /readyz answers 200", noCtx(runHealthcheck)},
		{"version", "version", "print the version", func(_ context.Context, _ []string, stdout, _ io.Writer) error {
			fmt.Fprintln(stdout, "quotagate", version)
			return nil
		}},
		{"help", "help", "print this help (also -h, --help)", func(_ context.Context, _ []string, stdout, _ io.Writer) error {
			writeUsage(stdout)
			return nil
		}},
	}
}

func noCtx(f func(args []string, stdout, stderr io.Writer) error) func(context.Context, []string, io.Writer, io.Writer) error {
	return func(_ context.Context, args []string, stdout, stderr io.Writer) error { return f(args, stdout, stderr) }
}

// lookupCommand returns the command a command line selects: the named one,
// help for -h/-help/--help, the gateway when the first argument is absent
// or another flag. ok is false for an unknown command name.
func lookupCommand(args []string) (c command, ok bool) {
	table := commands()
	if len(args) == 0 {
		return table[0], true
	}
	first := args[0]
	switch first {
	case "-h", "-help", "--help":
		first = "help"
	}
	for _, c := range table {
		if c.name != "" && c.name == first {
			return c, true
		}
	}
	if strings.HasPrefix(first, "-") {
		return table[0], true
	}
	return command{}, false
}

// unknownCommand is the error for a first argument that names no command.
func unknownCommand(name string) error {
	var names []string
	for _, c := range commands() {
		if c.name != "" {
			names = append(names, c.name)
		}
	}
	return usageErr("unknown command %q (commands: %s; run \"quotagate -h\" for help)", name, strings.Join(names, ", "))
}

// writeUsage prints every command of the table with its synopsis.
func writeUsage(w io.Writer) {
	fmt.Fprintln(w, "quotagate: an HTTP reverse proxy enforcing one rate limit across a fleet")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage:")
	tw := tabwriter.NewWriter(w, 2, 4, 3, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "  quotagate %s\t%s\n", c.synopsis, c.summary)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(w, `Run "quotagate COMMAND -h" for the flags of a command.`)
	fmt.Fprintln(w, "Exit codes: 0 ok, 1 invalid config or flags, 2 failure to start or run.")
}

// parseFlags parses args into fs, whose output is the command's stderr. -h
// prints the flags to stdout and ends the command with exit 0
// (errHelpShown); a bad flag is reported with the flags on stderr, exit 1,
// in one write that waits for stderr at most telemetry.StallTimeout,
// like every line written before the gateway starts: a stderr that does
// not read (a log reader that hung) cannot keep a start with a bad flag
// from exiting 1.
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	stderr := fs.Output()
	var msg bytes.Buffer
	fs.SetOutput(&msg)
	defer fs.SetOutput(stderr)
	fs.Usage = func() {}
	err := fs.Parse(args)
	if err == nil {
		return nil
	}
	fmt.Fprintf(&msg, "Usage of %s:\n", fs.Name())
	fs.PrintDefaults()
	if errors.Is(err, flag.ErrHelp) {
		_, _ = stdout.Write(msg.Bytes())
		return errHelpShown
	}
	_, _ = boundedWriter{w: stderr, timeout: telemetry.StallTimeout}.Write(msg.Bytes())
	return &exitError{code: 1, err: errors.New("")}
}

// errHelpShown ends a command whose help was printed: exit 0, no message.
var errHelpShown = &exitError{code: 0, err: errors.New("")}
