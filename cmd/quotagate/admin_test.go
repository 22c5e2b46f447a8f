package main

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
)

// loopbackURL dials a listener bound to every interface over loopback.
func loopbackURL(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return "http://127.0.0.1:" + port
}

func getStatus(t *testing.T, url, token string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header, string(b)
}

// TestBinaryAdminOnEveryInterface runs the shipped config the way the
// image does (admin listener on 0.0.0.0): without a token the probes and
// /metrics answer and the rest is refused; with one, the rest needs it.
func TestBinaryAdminOnEveryInterface(t *testing.T) {
	open := []string{"/healthz", "/readyz", "/metrics"}
	protected := []string{"/config", "/hotkeys", "/debug/pprof/"}

	proc := startBinary(t, "../../config.yaml",
		"QUOTAGATE_SERVER_LISTEN=127.0.0.1:0", "QUOTAGATE_SERVER_ADMIN_LISTEN=0.0.0.0:0", "QUOTAGATE_SERVER_PPROF=true")
	admin := loopbackURL(t, proc.AdminListen)
	for _, p := range open {
		if code, _, _ := getStatus(t, admin+p, ""); code != http.StatusOK {
			t.Errorf("no token, 0.0.0.0: %s answered %d, want 200", p, code)
		}
	}
	for _, p := range protected {
		code, h, body := getStatus(t, admin+p, "")
		if code != http.StatusForbidden || h.Get("Content-Type") != "application/problem+json" || !strings.Contains(body, "server.admin_token_env") {
			t.Errorf("no token, 0.0.0.0: %s answered %d %q, want a 403 problem naming server.admin_token_env", p, code, body)
		}
	}

	const token = "binary-admin-token-42"
	proc = startBinary(t, "../../config.yaml",
		"QUOTAGATE_SERVER_LISTEN=127.0.0.1:0", "QUOTAGATE_SERVER_ADMIN_LISTEN=0.0.0.0:0",
		"QUOTAGATE_SERVER_ADMIN_TOKEN_ENV=QG_TEST_ADMIN_TOKEN", "QG_TEST_ADMIN_TOKEN="+token, "QUOTAGATE_SERVER_PPROF=true")
	admin = loopbackURL(t, proc.AdminListen)
	for _, p := range open {
		if code, _, _ := getStatus(t, admin+p, ""); code != http.StatusOK {
			t.Errorf("token set: %s without it answered %d, want 200", p, code)
		}
	}
	for _, p := range protected {
		code, h, _ := getStatus(t, admin+p, "")
		if code != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("token set: %s without it answered %d (WWW-Authenticate %q), want 401 with a challenge", p, code, h.Get("WWW-Authenticate"))
		}
		if code, _, _ := getStatus(t, admin+p, token+"x"); code != http.StatusUnauthorized {
			t.Errorf("token set: %s with a wrong one answered %d, want 401", p, code)
		}
		if code, _, body := getStatus(t, admin+p, token); code != http.StatusOK {
			t.Errorf("token set: %s with it answered %d %q, want 200", p, code, body)
		}
	}
	if _, _, body := getStatus(t, admin+"/config", token); strings.Contains(body, token) || !strings.Contains(body, `"admin_token_env": "QG_TEST_ADMIN_TOKEN"`) {
		t.Errorf("/config shows the token or lacks its variable's name:\n%s", body)
	}
}

// TestBinaryAdminTokenVariableMissing: a token variable that the config
// names but the environment lacks, or holds empty, stops the start with
// exit 1, the field's name and the variable that set the field.
func TestBinaryAdminTokenVariableMissing(t *testing.T) {
	for _, env := range [][]string{{}, {"QG_TEST_ADMIN_TOKEN="}} {
		args := append([]string{"QUOTAGATE_SERVER_LISTEN=127.0.0.1:0", "QUOTAGATE_SERVER_ADMIN_LISTEN=127.0.0.1:0",
			"QUOTAGATE_SERVER_ADMIN_TOKEN_ENV=QG_TEST_ADMIN_TOKEN"}, env...)
		proc := proctest.Start(t, proctest.Binary(t), proctest.Options{
			Args: []string{"-config", "../../config.yaml"}, Env: proctest.Environ(args...), NoListen: true,
		})
		err := proc.Wait(time.Minute)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(proc.Logs.String(), "server.admin_token_env: environment variable QG_TEST_ADMIN_TOKEN is") ||
			!strings.Contains(proc.Logs.String(), "(from QUOTAGATE_SERVER_ADMIN_TOKEN_ENV)") {
			t.Errorf("env %q: exit %v, log:\n%s\nwant exit 1 naming server.admin_token_env", env, err, proc.Logs.String())
		}
	}
}

// TestBinarySecretVariablesMissing: every secret the config names by an
// environment variable is a config problem when the variable is missing,
// exit 1 naming the field (and the variable that set it), as for the admin
// token (docs/reference/cli.md#exit-codes: exit 1 for an invalid config, 2
// for a failure to start).
func TestBinarySecretVariablesMissing(t *testing.T) {
	for field, env := range map[string][]string{
		"identity.jwt.secret_env":  {"QUOTAGATE_IDENTITY_JWT_SECRET_ENV=QG_TEST_UNSET_SECRET"},
		"store.redis.password_env": {"QUOTAGATE_STORE_KIND=redis", "QUOTAGATE_STORE_REDIS_PASSWORD_ENV=QG_TEST_UNSET_SECRET"},
	} {
		args := append([]string{"QUOTAGATE_SERVER_LISTEN=127.0.0.1:0", "QUOTAGATE_SERVER_ADMIN_LISTEN=127.0.0.1:0"}, env...)
		proc := proctest.Start(t, proctest.Binary(t), proctest.Options{
			Args: []string{"-config", "../../config.yaml"}, Env: proctest.Environ(args...), NoListen: true,
		})
		err := proc.Wait(time.Minute)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(proc.Logs.String(), field+": environment variable QG_TEST_UNSET_SECRET is not set (from "+strings.SplitN(env[len(env)-1], "=", 2)[0]+")") {
			t.Errorf("%s unset: exit %v, log:\n%s\nwant exit 1 naming %s", field, err, proc.Logs.String(), field)
		}
	}
}
