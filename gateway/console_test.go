package gateway

import (
	"encoding/json"
	"io/fs"
	"net/http"
	"strings"
	"testing"
	"time"
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
	if st.StoreKind != cfg.Store.Kind || st.FleetSize != cfg.Store.FleetSize {
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
