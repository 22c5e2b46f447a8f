package gateway

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/config"
)

// TestWatchFileReloadsAChangeMadeBeforeItStarted: the file changes after
// the live configuration was loaded but before the watcher starts (a
// ConfigMap update or a deploy tool's write during the start). The first
// check reloads it; a check with nothing changed reloads nothing. Before,
// the watcher took its baseline when it started, so the change was taken
// for what was loaded and the old configuration stayed in force.
func TestWatchFileReloadsAChangeMadeBeforeItStarted(t *testing.T) {
	f := newFixture(t, baseConfig)
	_, loaded, err := config.LoadDigest(f.path, testGetenv)
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(renderConfig(baseConfig, f.upstream.srv.URL, deadURL(t)),
		"enterprise: {rate: 100, per: 1s, burst: 100}", "enterprise: {rate: 50, per: 1s, burst: 50}", 1)
	if err := os.WriteFile(f.path, []byte(changed), 0o600); err != nil {
		t.Fatal(err)
	}
	before := f.gw.Config()

	ctx, cancel := context.WithCancel(context.Background())
	tick := make(chan time.Time)
	done := make(chan struct{})
	go func() { f.gw.watchFile(ctx, f.path, tick, loaded); close(done) }()
	defer func() { cancel(); <-done }()
	// tick is unbuffered: the second send completes only once the first
	// check has finished.
	check := func() { tick <- time.Time{}; tick <- time.Time{} }

	check()
	after := f.gw.Config()
	if after == before {
		t.Fatal("a change made before the watcher started was not reloaded")
	}
	if got := after.Policies["tenant"].Limits["enterprise"].Rate; got != 50 {
		t.Fatalf("enterprise rate after the reload = %v, want 50", got)
	}
	check()
	if f.gw.Config() != after {
		t.Fatal("an unchanged file was reloaded again")
	}
}
