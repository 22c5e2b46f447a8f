package main

import (
	"bufio"
	"bytes"
	"errors"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
)

// readmeRunCommand returns the Quick start's command that runs the gateway,
// without its comment.
func readmeRunCommand(t *testing.T) string {
	t.Helper()
	f, err := os.Open("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if cmd, _, ok := strings.Cut(sc.Text(), "# run the gateway"); ok {
			return strings.TrimSpace(cmd)
		}
	}
	t.Fatal(`README.md has no line with "# run the gateway"`)
	return ""
}

// TestReadmeRunCommandStopsOnSIGTERM runs the README's run command the way
// a supervisor or script does (sh -c, then SIGTERM to that process) and
// checks that the gateway itself got the signal: it exits 0 after logging
// its drain, and both ports are free again. With `go run`, the signal ended
// only the go tool and the gateway kept the ports.
func TestReadmeRunCommandStopsOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary into bin/")
	}
	line := readmeRunCommand(t)
	// Building can take minutes on a busy machine.
	proc := proctest.Start(t, "sh", proctest.Options{
		Name:         "README run command",
		Args:         []string{"-c", line},
		Dir:          "../..",
		Env:          proctest.Environ("QUOTAGATE_SERVER_LISTEN=127.0.0.1:0", "QUOTAGATE_SERVER_ADMIN_LISTEN=127.0.0.1:0"),
		StartTimeout: 5 * time.Minute,
		FromLog:      true,
	})
	proc.WaitReady(0)
	proc.Signal(syscall.SIGTERM)
	if err := proc.Wait(time.Minute); err != nil {
		t.Fatalf("after SIGTERM: %v, want exit 0 from the gateway", err)
	}
	listen, admin := proc.Listen, proc.AdminListen
	logs := proc.Logs
	for _, addr := range []string{listen, admin} {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("%s still held after the command ended: %v", addr, err)
			continue
		}
		l.Close()
	}
	if !strings.Contains(logs.String(), `"drain_timeout":"10s"`) {
		t.Errorf("the drain log line lacks a readable drain_timeout:\n%s", logs.String())
	}
}

// TestBinaryNewcomerCommands runs the shipped binary the way the README
// tells a newcomer to: help, an unknown command, a malformed explain.
func TestBinaryNewcomerCommands(t *testing.T) {
	bin := proctest.Binary(t)
	for _, tc := range []struct {
		args []string
		code int
		want string // in stdout for exit 0, else in stderr
	}{
		{[]string{"-h"}, 0, "quotagate healthcheck"},
		{[]string{"--help"}, 0, "quotagate explain"},
		{[]string{"nope"}, 1, "healthcheck"},
		{[]string{"explain", "-config", "../../config.yaml", "-method", "GE T", "-path", "/x"}, 1, `method "GE T"`},
		{[]string{"explain", "-config", "../../config.yaml", "-path", "/a b"}, 1, "whitespace"},
		{[]string{"validate", "-config", "../../config/testdata/syntax/list_item_in_mapping.yaml"}, 1, "line 5: did not find expected key"},
	} {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(bin, tc.args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		out := stdout.String()
		if tc.code != 0 {
			out = stderr.String()
		}
		if code != tc.code || !strings.Contains(out, tc.want) || strings.Contains(stderr.String(), "panic") {
			t.Errorf("quotagate %q: exit %d, stdout %q, stderr %q; want exit %d with %q", tc.args, code, stdout.String(), stderr.String(), tc.code, tc.want)
		}
	}
}

// TestBinaryFreshMetricsHaveEveryDocumentedFamily scrapes the shipped
// gateway before its first request: every metric family the metrics
// reference (docs/reference/metrics.md) lists is already exported, at zero
// (the fleet's size at 1, this instance), and every quotagate family it
// exports is in the reference.
func TestBinaryFreshMetricsHaveEveryDocumentedFamily(t *testing.T) {
	reference, err := os.ReadFile("../../docs/reference/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	families := regexp.MustCompile("(?m)^\\| `(quotagate_[a-z_]+)` \\|").FindAllStringSubmatch(string(reference), -1)
	if len(families) < 10 {
		t.Fatalf("docs/reference/metrics.md lists %d metric families; the table was not found", len(families))
	}
	proc := startBinary(t, "../../config.yaml",
		"QUOTAGATE_SERVER_LISTEN=127.0.0.1:0", "QUOTAGATE_SERVER_ADMIN_LISTEN=127.0.0.1:0")
	body := proc.Metrics()
	for _, f := range families {
		name := f[1]
		re := regexp.MustCompile("(?m)^" + name + `(_bucket|_count|_sum)?(\{[^}]*\})? (\S+)$`)
		samples := re.FindAllStringSubmatch(body, -1)
		if len(samples) == 0 {
			t.Errorf("%s: no series on a fresh gateway", name)
		}
		want := "0"
		if name == "quotagate_fleet_size" { // this instance, at least
			want = "1"
		}
		for _, s := range samples {
			if s[3] != want {
				t.Errorf("%s%s%s = %s on a fresh gateway, want %s", name, s[1], s[2], s[3], want)
			}
		}
	}
	documented := map[string]bool{}
	for _, f := range families {
		documented[f[1]] = true
	}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (quotagate_[a-z_]+) `).FindAllStringSubmatch(body, -1) {
		if !documented[m[1]] {
			t.Errorf("%s: exported but not in docs/reference/metrics.md", m[1])
		}
	}
	checkDocumentedMetricLabels(t, readDocs(t), body)
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
}

// readDocs returns README.md and every page under docs/, one after the
// other.
func readDocs(t *testing.T) string {
	t.Helper()
	var all strings.Builder
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(path, "../../"))
		if d.IsDir() {
			if rel != "../.." && rel != "docs" && !strings.HasPrefix(rel, "docs/") {
				return filepath.SkipDir
			}
			return nil
		}
		if rel == "README.md" || strings.HasPrefix(rel, "docs/") && strings.HasSuffix(rel, ".md") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			all.Write(b)
			all.WriteByte('\n')
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return all.String()
}

// checkDocumentedMetricLabels checks every mention of a metric with labels
// anywhere in the prose of the README and docs/, such as
// quotagate_decisions_total{policy,result="shadow_denied"}: the family is
// exported and its series carry each label named. (Values are not checked:
// many appear only once traffic, a reload or a failure made them.)
func checkDocumentedMetricLabels(t *testing.T, docs, metrics string) {
	t.Helper()
	labelsOf := map[string]map[string]bool{} // family -> label keys seen in its series
	series := regexp.MustCompile(`(?m)^(quotagate_[a-z_]+?)(_bucket|_count|_sum)?\{([^}]*)\} `)
	for _, m := range series.FindAllStringSubmatch(metrics, -1) {
		if labelsOf[m[1]] == nil {
			labelsOf[m[1]] = map[string]bool{}
		}
		for _, kv := range strings.Split(m[3], ",") {
			k, _, _ := strings.Cut(kv, "=")
			labelsOf[m[1]][k] = true
		}
	}
	mentions := regexp.MustCompile("`(quotagate_[a-z_]+)\\{([^}`]*)\\}`").FindAllStringSubmatch(docs, -1)
	if len(mentions) < 10 {
		t.Fatalf("found %d metric mentions with labels in the docs; the pattern no longer matches", len(mentions))
	}
	for _, m := range mentions {
		name, have := m[1], labelsOf[m[1]]
		if have == nil {
			t.Errorf("the docs mention %s, which the gateway does not export with labels", m[0])
			continue
		}
		for _, kv := range strings.Split(m[2], ",") {
			if k, _, _ := strings.Cut(strings.TrimSpace(kv), "="); !have[k] {
				t.Errorf("the docs mention %s: %s has no label %q", m[0], name, k)
			}
		}
	}
}
