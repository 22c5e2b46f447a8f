package config

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/quotagate/quotagate/internal/redistest"
)

// rlsClientAuthCases pairs each fixture of testdata/rls_client_auth with
// every problem Load must report for it, in order.
var rlsClientAuthCases = map[string][]string{
	"exposed.yaml": {
		`rls.client_auth: is required: rls.listen "0.0.0.0:8081" is not a loopback address, so whoever reaches it could read any descriptor's remaining (dry_run) and spend it; set token_env (a shared bearer token) and/or client_ca_file (client certificates, with rls.tls), or none: true to serve it unauthenticated on purpose`,
	},
	"exposed_http.yaml": {
		`rls.client_auth: is required: rls.http_listen "10.0.0.5:8082" is not a loopback address, so whoever reaches it could read any descriptor's remaining (dry_run) and spend it; set token_env (a shared bearer token) and/or client_ca_file (client certificates, with rls.tls), or none: true to serve it unauthenticated on purpose`,
	},
	"none_and_token.yaml": {
		`rls.client_auth.none: must not be set with token_env or client_ca_file (none serves every call unauthenticated)`,
	},
	"empty.yaml": {
		`rls.client_auth: must set token_env, client_ca_file or both (or none: true to serve every call unauthenticated)`,
	},
	"bad_fields.yaml": {
		`rls.client_auth.client_ca_file: requires rls.tls (the service's certificate and key): client certificates are asked for in the TLS handshake`,
		`rls.client_auth.client_ca_file: testdata/minimal.yaml holds no PEM certificate`,
		`rls.client_auth.token_env: must name an environment variable, got "rls token"`,
	},
	"unreadable_ca.yaml": {
		`rls.client_auth.client_ca_file: cannot be read: open testdata/rls_client_auth/missing-ca.pem: no such file or directory`,
		`rls.client_auth.tokn_env: unknown key (did you mean "token_env"?)`,
	},
}

// TestRLSClientAuthInvalid: a decision service listening beyond loopback
// without rls.client_auth is refused, naming the field and why; so are
// contradictory or incomplete client_auth sections.
func TestRLSClientAuthInvalid(t *testing.T) {
	files, err := filepath.Glob("testdata/rls_client_auth/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, ok := rlsClientAuthCases[filepath.Base(f)]; !ok {
			t.Errorf("%s has no expected problems in rlsClientAuthCases", f)
		}
	}
	for name, want := range rlsClientAuthCases {
		t.Run(strings.TrimSuffix(name, ".yaml"), func(t *testing.T) {
			_, err := Load(filepath.Join("testdata", "rls_client_auth", name), noEnv)
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("Load error = %v (%T), want Errors", err, err)
			}
			var got []string
			for _, e := range es {
				got = append(got, e.Error())
			}
			if !slices.Equal(got, want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// rlsBase is a valid configuration for the rls sections below.
const rlsBase = `identity: {anonymous: {tier: free}}
tiers: {free: {}}
upstreams: {app: {url: "echo:"}}
routes: [{name: app, method: GET, path: /, upstream: app}]
`

// TestRLSClientAuthValid: loopback listeners may go without client_auth;
// beyond loopback a token, client certificates, both, or an explicit
// none: true are accepted.
func TestRLSClientAuthValid(t *testing.T) {
	files := redistest.NewTLSFiles(t)
	tlsFiles := `tls: {cert_file: "` + files.ServerCert + `", key_file: "` + files.ServerKey + `"}`
	for _, rls := range []string{
		`{listen: "127.0.0.1:8081", http_listen: "127.0.0.1:0", config_files: [e.yaml]}`,
		`{listen: "localhost:8081", http_listen: "[::1]:8082", config_files: [e.yaml]}`,
		`{listen: "127.0.0.2:8081", config_files: [e.yaml]}`,
		`{listen: "0.0.0.0:8081", config_files: [e.yaml], client_auth: {none: true}}`,
		`{listen: ":8081", http_listen: ":8082", config_files: [e.yaml], client_auth: {token_env: RLS_TOKEN}}`,
		`{listen: "10.0.0.5:8081", config_files: [e.yaml], ` + tlsFiles + `, client_auth: {client_ca_file: "` + files.CA + `"}}`,
		`{listen: "[::]:8081", config_files: [e.yaml], ` + tlsFiles + `, client_auth: {token_env: RLS_TOKEN, client_ca_file: "` + files.CA + `"}}`,
		// Off: nothing listens, nothing is required.
		`{config_files: [e.yaml]}`,
	} {
		if _, err := Parse([]byte(rlsBase+"rls: "+rls+"\n"), noEnv); err != nil {
			t.Errorf("rls: %s\n%v", rls, err)
		}
	}
}

// TestRLSClientAuthWithoutValue: "client_auth:" written without a value
// is the section left out, so it does not satisfy the rule.
func TestRLSClientAuthWithoutValue(t *testing.T) {
	_, err := Parse([]byte(rlsBase+"rls:\n  listen: \"0.0.0.0:8081\"\n  config_files: [e.yaml]\n  client_auth:\n"), noEnv)
	if err == nil || !strings.Contains(err.Error(), "rls.client_auth: is required") {
		t.Fatalf("err = %v, want rls.client_auth: is required", err)
	}
}

func TestLoopbackListen(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8081": true, "127.9.9.9:0": true, "[::1]:8081": true, "localhost:8081": true, "LocalHost:1": true,
		"[::ffff:127.0.0.1]:8081": true,
		"0.0.0.0:8081":            false, ":8081": false, "[::]:8081": false, "10.0.0.5:8081": false,
		"rls.internal:8081": false, "localhost.example.com:1": false, "[fe80::1%lo]:1": false, "garbage": false,
	} {
		if got := loopbackListen(addr); got != want {
			t.Errorf("loopbackListen(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestRedactedRLSClientAuth: /config shows client_auth with the token's
// variable by name, never its value.
func TestRedactedRLSClientAuth(t *testing.T) {
	c := mustParse(t, rlsBase+`rls: {listen: "0.0.0.0:8081", config_files: [e.yaml], client_auth: {token_env: RLS_TOKEN}}`+"\n",
		func(k string) (string, bool) { return "s3cret-token", k == "RLS_TOKEN" })
	out, err := json.Marshal(c.Redacted()["rls"])
	if err != nil {
		t.Fatal(err)
	}
	if s := string(out); !strings.Contains(s, `"client_auth":{"client_ca_file":"","none":false,"token_env":"RLS_TOKEN"}`) || strings.Contains(s, "s3cret") {
		t.Errorf("rls redacted: %s", s)
	}
}
