package rls

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/internal/syncbuf"
	"github.com/quotagate/quotagate/ratelimit/memstore"
)

// TestWatchReloadsAChangeMadeBeforeItStarted: a descriptor file changes
// after the server loaded it but before Watch starts (a ConfigMap update
// during the start). The first check reloads it and says the change is
// one since the start; a check with nothing changed reloads nothing.
// Before, Watch took its baseline when it started, so the change was taken
// for what was loaded and never applied.
func TestWatchReloadsAChangeMadeBeforeItStarted(t *testing.T) {
	dir := t.TempDir()
	desc := filepath.Join(dir, "edge.yaml")
	write := func(path, text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(desc, "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10}\n")
	main := filepath.Join(dir, "config.yaml")
	mainText := `store: {kind: memory}
identity: {anonymous: {tier: anonymous}}
tiers: {anonymous: {}}
upstreams: {app: {url: "echo:"}}
routes: [{name: app, method: GET, path: /, upstream: app}]
rls:
  listen: "127.0.0.1:0"
  config_files: [` + desc + `]
`
	write(main, mainText)
	cfg, loaded, err := config.LoadDigest(main, nil)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { store.Close() })
	srv, err := NewServer(cfg, ServerOptions{Store: store, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}

	// The change lands between the load and the watch.
	write(desc, "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10}\n")
	ctx, cancel := context.WithCancel(context.Background())
	tick := make(chan time.Time)
	done := make(chan struct{})
	go func() { srv.watch(ctx, main, tick, combineDigests(loaded, srv.loadedFiles)); close(done) }()
	defer func() { cancel(); <-done }()
	// tick is unbuffered: the second send completes only once the first
	// check has finished.
	check := func() { tick <- time.Time{}; tick <- time.Time{} }

	check()
	if got := strings.Count(logs.String(), "rls descriptor files reloaded"); got != 1 {
		t.Fatalf("a descriptor file changed before Watch: %d reloads, want 1; log:\n%s", got, logs)
	}
	if !strings.Contains(logs.String(), "since=start") {
		t.Fatalf("the reload does not say the file changed since the start; log:\n%s", logs)
	}
	if _, ok := srv.Engine().Rules().domains["other"]; !ok {
		t.Fatal("the reload did not apply the changed descriptor file")
	}
	check()
	if got := strings.Count(logs.String(), "reloaded"); got != 1 {
		t.Fatalf("unchanged files: %d reloads, want still 1; log:\n%s", got, logs)
	}

	// A reload that adds a descriptor file is one reload: the next check,
	// with nothing changed, compares with the files the reload loaded.
	// Before, it compared with a digest made over the old list of files,
	// and reloaded again.
	second := filepath.Join(dir, "more.yaml")
	write(second, "domain: more\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10}\n")
	write(main, strings.Replace(mainText, "config_files: ["+desc+"]", "config_files: ["+desc+", "+second+"]", 1))
	check()
	tick <- time.Time{} // the second check of check() has finished
	if got := strings.Count(logs.String(), "reloaded"); got != 2 {
		t.Fatalf("a reload that adds a descriptor file: %d reloads in all, want 2; log:\n%s", got, logs)
	}
	if _, ok := srv.Engine().Rules().domains["more"]; !ok {
		t.Fatal("the reload did not load the added descriptor file")
	}
}
