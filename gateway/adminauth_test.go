package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/ratelimit/stack"
)

const adminToken = "adm-0123456789abcdef"

// adminEnv is testGetenv with the admin token in TEST_ADMIN_TOKEN and an
// empty TEST_EMPTY.
func adminEnv(name string) (string, bool) {
	switch name {
	case "TEST_ADMIN_TOKEN":
		return adminToken, true
	case "TEST_EMPTY":
		return "", true
	}
	return testGetenv(name)
}

// adminGateway builds a gateway on baseConfig with server lines added.
func adminGateway(t *testing.T, serverLines string) (*fixture, error) {
	t.Helper()
	f := &fixture{clock: newTestClock(), upstream: newUpstream(t)}
	text := strings.Replace(baseConfig, "server:\n", "server:\n"+serverLines, 1)
	f.path = writeConfig(t, renderConfig(text, f.upstream.srv.URL, deadURL(t)))
	cfg, err := config.Load(f.path, adminEnv)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	gw, err := New(cfg, Options{Now: f.clock.Now, Getenv: adminEnv, OpenStore: func(c config.Store) (*stack.Stack, error) {
		return stack.New(nil, stack.Options{Now: f.clock.Now, FleetSize: c.FleetSize}), nil
	}})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = gw.Close() })
	f.gw = gw
	return f, nil
}

func mustAdminGateway(t *testing.T, serverLines string) *fixture {
	t.Helper()
	f, err := adminGateway(t, serverLines)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// serveAdminOn runs f's gateway with its admin listener on adminAddr and
// returns the admin base URL, dialled over loopback.
func (f *fixture) serveAdminOn(t *testing.T, adminAddr string) string {
	t.Helper()
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	al, err := net.Listen("tcp", adminAddr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.gw.Serve(ctx, pl, al, f.gw.Admin(http.NotFoundHandler())) }()
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { cancel(); <-done }) })
	_, port, _ := net.SplitHostPort(al.Addr().String())
	return "http://127.0.0.1:" + port
}

type adminAnswer struct {
	code   int
	header http.Header
	body   string
}

func adminGet(t *testing.T, url, authorization string) adminAnswer {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return adminAnswer{resp.StatusCode, resp.Header, string(b)}
}

// checkProblem asserts a problem+json answer with its status and code.
func checkProblem(t *testing.T, what string, a adminAnswer, status int, code string) {
	t.Helper()
	var p map[string]any
	if a.code != status || a.header.Get("Content-Type") != "application/problem+json" ||
		json.Unmarshal([]byte(a.body), &p) != nil || p["error"] != code || p["request_id"] == "" ||
		p["title"] == "" || p["status"] != float64(status) {
		t.Errorf("%s: %d %s %q, want %d problem+json %q", what, a.code, a.header.Get("Content-Type"), a.body, status, code)
	}
}

var protectedAdminPaths = []string{"/config", "/hotkeys", "/console/state", "/debug/pprof/"}

func TestAdminTokenGuardsTheProtectedEndpoints(t *testing.T) {
	f := mustAdminGateway(t, "  admin_token_env: TEST_ADMIN_TOKEN\n  pprof: true\n")
	admin := f.serveAdminOn(t, "127.0.0.1:0")
	for _, path := range []string{"/healthz", "/readyz"} {
		if a := adminGet(t, admin+path, ""); a.code != http.StatusOK {
			t.Errorf("%s without a token: %d, want 200 (probes need it)", path, a.code)
		}
	}
	if a := adminGet(t, admin+"/metrics", ""); a.code != http.StatusNotFound { // the test's metrics handler
		t.Errorf("/metrics without a token: %d, want the metrics handler's answer", a.code)
	}
	for _, path := range protectedAdminPaths {
		a := adminGet(t, admin+path, "")
		checkProblem(t, path+" without a token", a, http.StatusUnauthorized, codeUnauthenticated)
		if !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer ") {
			t.Errorf("%s without a token: WWW-Authenticate %q", path, a.header.Get("WWW-Authenticate"))
		}
		for _, wrong := range []string{"Bearer " + adminToken + "x", "Bearer " + adminToken[:len(adminToken)-1], "Basic " + adminToken, "Bearer", adminToken, "Bearer  "} {
			a := adminGet(t, admin+path, wrong)
			checkProblem(t, path+" with "+wrong, a, http.StatusUnauthorized, codeUnauthenticated)
			if a.header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s with %q: no WWW-Authenticate", path, wrong)
			}
		}
		for _, right := range []string{"Bearer " + adminToken, "bearer " + adminToken} {
			if a := adminGet(t, admin+path, right); a.code != http.StatusOK {
				t.Errorf("%s with %q: %d %s, want 200", path, right, a.code, a.body)
			}
		}
	}
	if a := adminGet(t, admin+"/debug/pprof/cmdline", "Bearer "+adminToken); a.code != http.StatusOK {
		t.Errorf("/debug/pprof/cmdline with the token: %d", a.code)
	}
}

func TestAdminPprofIsOffByDefault(t *testing.T) {
	f := mustAdminGateway(t, "  admin_token_env: TEST_ADMIN_TOKEN\n")
	admin := f.serveAdminOn(t, "127.0.0.1:0")
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/vars"} {
		if a := adminGet(t, admin+path, "Bearer "+adminToken); a.code != http.StatusNotFound {
			t.Errorf("%s with pprof off: %d, want 404", path, a.code)
		}
		// Unauthenticated callers cannot learn whether profiles are on.
		if a := adminGet(t, admin+path, ""); a.code != http.StatusUnauthorized {
			t.Errorf("%s with pprof off, without a token: %d, want 401", path, a.code)
		}
	}
}

// TestAdminWithoutTokenServesOnlyLoopback: with no token configured, the
// protected endpoints answer only on a loopback-bound listener; bound to
// every interface, they are 403 (the open ones stay open).
func TestAdminWithoutTokenServesOnlyLoopback(t *testing.T) {
	f := mustAdminGateway(t, "  pprof: true\n")
	loop := f.serveAdminOn(t, "127.0.0.1:0")
	for _, path := range protectedAdminPaths {
		if a := adminGet(t, loop+path, ""); a.code != http.StatusOK {
			t.Errorf("%s on a loopback listener without a token: %d, want 200", path, a.code)
		}
	}

	g := mustAdminGateway(t, "  pprof: true\n")
	wide := g.serveAdminOn(t, ":0") // every interface, dialled over loopback
	for _, path := range protectedAdminPaths {
		a := adminGet(t, wide+path, "")
		checkProblem(t, path+" on a wildcard listener", a, http.StatusForbidden, codeForbidden)
		if !strings.Contains(a.body, "server.admin_token_env") {
			t.Errorf("%s: the 403 does not say how to enable it: %s", path, a.body)
		}
		if a := adminGet(t, wide+path, "Bearer anything"); a.code != http.StatusForbidden {
			t.Errorf("%s on a wildcard listener with some token: %d, want 403", path, a.code)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if a := adminGet(t, wide+path, ""); a.code != http.StatusOK {
			t.Errorf("%s on a wildcard listener: %d, want 200", path, a.code)
		}
	}
}

func TestAdminTokenVariableMustBeSet(t *testing.T) {
	for env, want := range map[string]string{
		"TEST_NOT_SET": "server.admin_token_env: environment variable TEST_NOT_SET is not set",
		"TEST_EMPTY":   "server.admin_token_env: environment variable TEST_EMPTY is empty",
	} {
		_, err := adminGateway(t, "  admin_token_env: "+env+"\n")
		var invalid config.Errors
		if !errors.As(err, &invalid) || err.Error() != want {
			t.Errorf("New with %s: %v, want the config error %q", env, err, want)
		}
	}

	// A reload that names a missing variable is refused; the old token holds.
	f := mustAdminGateway(t, "  admin_token_env: TEST_ADMIN_TOKEN\n")
	cfg, err := config.Load(f.path, adminEnv)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Server.AdminTokenEnv = "TEST_NOT_SET"
	if err := f.gw.Reload(cfg, 0); err == nil || !strings.Contains(err.Error(), "server.admin_token_env") {
		t.Errorf("Reload with a missing token variable: %v", err)
	}
	// A reload of the file, whose token variable's name comes from the
	// environment, names that variable too.
	f.gw.opts.Getenv = func(name string) (string, bool) {
		if name == "QUOTAGATE_SERVER_ADMIN_TOKEN_ENV" {
			return "TEST_NOT_SET", true
		}
		return adminEnv(name)
	}
	want := "server.admin_token_env: environment variable TEST_NOT_SET is not set (from QUOTAGATE_SERVER_ADMIN_TOKEN_ENV)"
	if err := f.gw.ReloadFile(f.path); err == nil || err.Error() != want {
		t.Errorf("ReloadFile with a missing token variable set from the environment: %v, want %q", err, want)
	}
	admin := f.serveAdminOn(t, "127.0.0.1:0")
	if a := adminGet(t, admin+"/config", "Bearer "+adminToken); a.code != http.StatusOK {
		t.Errorf("after the refused reloads: %d, want the old token to hold", a.code)
	}
}

// TestAdminConfigRedactsUpstreamURLs: query strings of upstream URLs, the
// token and every secret stay off /config. (User information never reaches
// a live configuration: the proxy refuses it; config.TestRedacted covers it.)
func TestAdminConfigRedactsUpstreamURLs(t *testing.T) {
	f := mustAdminGateway(t, "  admin_token_env: TEST_ADMIN_TOKEN\n")
	cfg, err := config.Load(f.path, adminEnv)
	if err != nil {
		t.Fatal(err)
	}
	for name, u := range cfg.Upstreams {
		if strings.HasPrefix(u.URL, "http://127.0.0.1") {
			u.URL += "/base?api_key=k3y-in-query"
			cfg.Upstreams[name] = u
		}
	}
	if err := f.gw.Reload(cfg, 0); err != nil {
		t.Fatal(err)
	}
	admin := f.serveAdminOn(t, "127.0.0.1:0")
	a := adminGet(t, admin+"/config", "Bearer "+adminToken)
	if a.code != http.StatusOK || !strings.Contains(a.body, "/base?redacted") {
		t.Fatalf("/config: %d %s", a.code, a.body)
	}
	for _, secret := range []string{"k3y-in-query", adminToken, jwtSecret, sha256Hex(freeKey)} {
		if strings.Contains(a.body, secret) {
			t.Errorf("/config shows %q:\n%s", secret, a.body)
		}
	}
}
