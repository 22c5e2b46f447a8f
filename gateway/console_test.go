package gateway

import (
	"context"
	"encoding/json"
	"io/fs"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/stack"
)

// TestConsoleAssetsAreSelfContained checks that the console's page and
// assets are served from the binary and refer to nothing outside the
// admin listener (the console works offline, with no CDN).
func TestConsoleAssetsAreSelfContained(t *testing.T) {
	f := mustAdminGateway(t, "")
	admin := f.serveAdminOn(t, "127.0.0.1:0")
	want := map[string]string{"/": "text/html", "/console/console.js": "text/javascript", "/console/console.css": "text/css"}
	for path, ctype := range want {
		a := adminGet(t, admin+path, "")
		if a.code != http.StatusOK || !strings.HasPrefix(a.header.Get("Content-Type"), ctype) {
			t.Errorf("GET %s: %d %q, want 200 %s", path, a.code, a.header.Get("Content-Type"), ctype)
		}
	}
	if a := adminGet(t, admin+"/", ""); !strings.Contains(a.body, `src="/console/console.js"`) {
		t.Errorf("the page does not load /console/console.js:\n%s", a.body)
	}
	err := fs.WalkDir(consoleFiles, "console", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := consoleFiles.ReadFile(path)
		if err != nil {
			return err
		}
		for _, ref := range []string{"http://", "https://", "//cdn", "@import"} {
			if strings.Contains(string(b), ref) {
				t.Errorf("%s refers to %q: the console must not load anything from elsewhere", path, ref)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestConsoleState checks GET /console/state: the configured policies in
// name order, the fleet and store, and the last reload once one was tried.
func TestConsoleState(t *testing.T) {
	f := mustAdminGateway(t, "")
	admin := f.serveAdminOn(t, "127.0.0.1:0")
	get := func() consoleState {
		t.Helper()
		a := adminGet(t, admin+"/console/state", "")
		var st consoleState
		if a.code != http.StatusOK || json.Unmarshal([]byte(a.body), &st) != nil {
			t.Fatalf("GET /console/state: %d %s", a.code, a.body)
		}
		return st
	}
	st := get()
	var names []string
	for _, p := range st.Policies {
		names = append(names, p.Name)
		if p.Scope == "" || p.OnStoreError == "" || p.Algorithm == "" {
			t.Errorf("policy %+v: scope, algorithm and on_store_error must be set", p)
		}
	}
	cfg := f.gw.Config()
	if len(names) != len(cfg.Policies) {
		t.Errorf("policies %v, want the %d configured", names, len(cfg.Policies))
	}
	for i := 1; i < len(names); i++ {
		if names[i-1] >= names[i] {
			t.Errorf("policies %v are not in name order", names)
		}
	}
	if st.StoreKind != string(cfg.Store.Kind) || st.FleetSize != int64(cfg.Store.FleetSize) {
		t.Errorf("store %q fleet %d, want %q %d", st.StoreKind, st.FleetSize, cfg.Store.Kind, cfg.Store.FleetSize)
	}
	if len(st.ConfigVersion) != 12 || st.LastReload != nil {
		t.Errorf("config_version %q last_reload %+v, want 12 hex digits and no reload yet", st.ConfigVersion, st.LastReload)
	}
	f.clock.Add(time.Minute)
	f.gw.RejectReload()
	after := get()
	if after.LastReload == nil || after.LastReload.Result != "error" || after.LastReload.At != f.clock.Now().UTC().Format(time.RFC3339) {
		t.Errorf("after a rejected reload last_reload = %+v, want error at %s", after.LastReload, f.clock.Now().UTC().Format(time.RFC3339))
	}
	if after.ConfigVersion != st.ConfigVersion || after.ConfigSince != st.ConfigSince {
		t.Errorf("a rejected reload changed the config version or time: %+v -> %+v", st, after)
	}
}

// TestConsoleStateListsBreakersByPrimary: with a breaker per Cluster
// primary, /console/state lists each primary's state in address order.
func TestConsoleStateListsBreakersByPrimary(t *testing.T) {
	f := &fixture{clock: newTestClock(), upstream: newUpstream(t)}
	f.path = writeConfig(t, renderConfig(baseConfig, f.upstream.srv.URL, deadURL(t)))
	cfg, err := config.Load(f.path, adminEnv)
	if err != nil {
		t.Fatal(err)
	}
	// A breaker with one domain per key, over a store that fails key "b":
	// two failures open domain b, domain a stays closed.
	breaker := stack.NewBreaker(downStore{down: "10.0.0.2:7001"}, stack.BreakerOptions{
		Failures: 2, Now: f.clock.Now, Partition: func(_ context.Context, items []ratelimit.Item) string { return items[0].Key }})
	for _, key := range []string{"10.0.0.1:7000", "10.0.0.2:7001", "10.0.0.2:7001"} {
		_, _ = breaker.Decide(context.Background(), []ratelimit.Item{{Key: key}})
	}
	gw, err := New(cfg, Options{Now: f.clock.Now, Getenv: adminEnv, OpenStore: func(c config.Store) (*stack.Stack, error) {
		return stack.New(breaker, stack.Options{Breaker: breaker, Now: f.clock.Now, FleetSize: c.FleetSize}), nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	f.gw = gw
	a := adminGet(t, f.serveAdminOn(t, "127.0.0.1:0")+"/console/state", "")
	var st consoleState
	if a.code != http.StatusOK || json.Unmarshal([]byte(a.body), &st) != nil {
		t.Fatalf("GET /console/state: %d %s", a.code, a.body)
	}
	want := []consoleBreaker{{"10.0.0.1:7000", 0}, {"10.0.0.2:7001", 2}}
	if st.BreakerState != 2 || !slices.Equal(st.Breakers, want) {
		t.Errorf("breaker_state %d breakers %+v, want 2 and %+v", st.BreakerState, st.Breakers, want)
	}
}

// downStore fails every batch whose first key is down and allows the rest.
type downStore struct{ down string }

func (s downStore) Decide(_ context.Context, items []ratelimit.Item) (ratelimit.Decision, error) {
	if items[0].Key == s.down {
		return ratelimit.Decision{}, ratelimit.ErrUnavailable
	}
	return ratelimit.Decision{Allowed: true, Results: make([]ratelimit.Result, len(items))}, nil
}

func (downStore) Close() error { return nil }
