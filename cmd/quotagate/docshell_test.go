package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
)

// A shell block of the docs whose info string is `sh run` is executed by
// TestDocShellBlocks, as a reader would in "another terminal" beside the
// demo: in a directory holding the shipped config.yaml and the built binary
// as bin/quotagate, against a fresh gateway on that config. The block's
// localhost:8080 and localhost:9090 are rewritten to the ports the gateway
// bound. Every `# → text` in the block (on a command's line or on a line of
// its own after it) is an output the block must print: the block's standard
// output, with runs of white space made one space, must hold each such text
// in the order written.
const (
	shellRunInfo  = "sh run"
	expectsMarker = "# → "
)

// shellBlock is one `sh run` block of a Markdown file.
type shellBlock struct {
	file string
	line int // of the opening fence
	text string
}

// expects returns the outputs the block promises, in order.
func (b shellBlock) expects() []string {
	var out []string
	for _, l := range strings.Split(b.text, "\n") {
		if i := strings.Index(l, expectsMarker); i >= 0 {
			out = append(out, squash(l[i+len(expectsMarker):]))
		}
	}
	return out
}

// squash makes every run of white space in s one space and trims it.
func squash(s string) string { return strings.Join(strings.Fields(s), " ") }

// shellBlocks returns the `sh run` blocks of file.
func shellBlocks(t *testing.T, file string) []shellBlock {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []shellBlock
	var cur *shellBlock
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			if strings.TrimSpace(strings.TrimPrefix(line, "```")) == shellRunInfo {
				cur = &shellBlock{file: file, line: n}
			}
		case cur != nil && strings.HasPrefix(line, "```"):
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("%s:%d: the block is never closed", file, cur.line)
	}
	return blocks
}

// TestDocShellBlocks runs every `sh run` block of the README and docs/.
func TestDocShellBlocks(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("curl is not installed and CI=true: the docs' shell blocks cannot run")
		}
		t.Skip("curl not installed")
	}
	var blocks []shellBlock
	for _, file := range docFiles(t) {
		blocks = append(blocks, shellBlocks(t, file)...)
	}
	// The README's tour and the getting-started page are the least the
	// suite must run; a page losing its marks must not pass silently.
	have := map[string]bool{}
	for _, b := range blocks {
		have[filepath.Base(b.file)] = true
	}
	for _, want := range []string{"README.md", "getting-started.md", "console.md"} {
		if !have[want] {
			t.Errorf("%s has no `%s` block", want, shellRunInfo)
		}
	}
	config, err := filepath.Abs("../../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bin := proctest.Binary(t)
	for _, b := range blocks {
		b := b
		name := strings.TrimPrefix(b.file, "../../") + ":" + strconv.Itoa(b.line)
		t.Run(name, func(t *testing.T) {
			if len(b.expects()) == 0 {
				t.Fatalf("%s: a `%s` block must promise at least one output (%q)", name, shellRunInfo, expectsMarker)
			}
			// A block that counts admissions (a burst, then denials) holds
			// only if it runs faster than the policy refills; on a machine
			// too busy for that, three fresh attempts that each ran longer
			// than a second are reported as a missed deadline.
			var slow bool
			var last string
			for attempt := 0; attempt < 3; attempt++ {
				out, took := runShellBlock(t, bin, config, b)
				missing := missingExpect(out, b.expects())
				if missing == "" {
					return
				}
				slow = took > time.Second
				last = "the block printed:\n" + out + "\nwhich lacks (in order) " + missing
				if !slow {
					break
				}
			}
			if slow {
				proctest.Overrun(t, "%s: every attempt ran over a second; %s", name, last)
				return
			}
			t.Errorf("%s: %s", name, last)
		})
	}
}

// missingExpect returns the first of expects that out does not hold in
// order (white space squashed), or "" when it holds them all.
func missingExpect(out string, expects []string) string {
	rest := squash(out)
	for _, e := range expects {
		i := strings.Index(rest, e)
		if i < 0 {
			return "“" + e + "”"
		}
		rest = rest[i+len(e):]
	}
	return ""
}

// runShellBlock runs b with bash against a fresh gateway on config and
// returns what it printed (standard output, then standard error) and how
// long it ran. A block that exits non-zero fails the test.
func runShellBlock(t *testing.T, bin, config string, b shellBlock) (string, time.Duration) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(dir, "bin", "quotagate")); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	p := startBinary(t, filepath.Join(dir, "config.yaml"),
		"QUOTAGATE_SERVER_LISTEN=127.0.0.1:0", "QUOTAGATE_SERVER_ADMIN_LISTEN=127.0.0.1:0")
	defer func() { _ = p.Stop() }()
	script := strings.NewReplacer("localhost:8080", p.Listen, "localhost:9090", p.AdminListen).Replace(b.text)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	took := time.Since(start)
	if err != nil {
		t.Fatalf("%s:%d: the block failed (%v) after %v:\n%s\nstdout:\n%s\nstderr:\n%s",
			b.file, b.line, err, took.Round(time.Millisecond), script, stdout.String(), stderr.String())
	}
	return stdout.String(), took
}
