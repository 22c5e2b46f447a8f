package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/ratelimit/stack"
	"github.com/quotagate/quotagate/ratelimit/storetest"
)

// Demo credentials used across the tests; the config holds their SHA-256.
const (
	freeKey       = "free-key-1"
	enterpriseKey = "enterprise-key-1"
)

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// newTestClock returns the settable clock shared by the local stage, the
// memory store and JWT checks of a fixture.
func newTestClock() *storetest.Clock {
	return storetest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
}

// baseConfig is a complete config in the shipped format; UPSTREAM, FREEHASH
// and ENTHASH are substituted by writeConfig.
const baseConfig = `
server:
  listen: 127.0.0.1:0
  admin_listen: 127.0.0.1:0
  trusted_proxies: [10.0.0.0/8]
  max_body_bytes: 1024
identity:
  api_keys:
    - {key_sha256: FREEHASH, tenant: acme, tier: free}
    - {key_sha256: ENTHASH, tenant: bigco, tier: enterprise}
  jwt:
    secret_env: TEST_JWT_SECRET
  anonymous:
    tier: anonymous
tiers:
  anonymous: {local: {rate: 2, per: 1s, burst: 5}}
  free: {}
  enterprise: {}
policies:
  tenant:
    limits:
      anonymous: {rate: 1, per: 1s, burst: 5}
      free: {rate: 1, per: 1s, burst: 5}
      enterprise: {rate: 100, per: 1s, burst: 100}
  transfers:
    scope: tenant_route
    on_store_error: closed
    limits:
      "*": {rate: 10, per: 1m, burst: 10}
  audit:
    shadow: true
    limits:
      "*": {rate: 1, per: 1h, burst: 5}
  inflight:
    algorithm: concurrency
    limits:
      "*": {max: 50}
upstreams:
  payments: {url: UPSTREAM, timeout: 300ms}
  dead: {url: DEADURL, timeout: 300ms}
  patient: {url: UPSTREAM, timeout: 10s}
routes:
  - {name: transfers.create, method: POST, path: "/v1/transfers/{id}", upstream: payments, cost: 5, policies: [tenant, transfers]}
  - {name: transfers.get, method: GET, path: "/v1/transfers/{id}", upstream: payments, policies: [tenant]}
  - {name: audit.get, method: GET, path: "/v1/audit", upstream: payments, policies: [audit]}
  - {name: open.get, method: GET, path: "/v1/open", upstream: patient}
  - {name: slow.get, method: GET, path: "/v1/slow", upstream: payments}
  - {name: dead.get, method: GET, path: "/v1/dead", upstream: dead}
  - {name: gated.get, method: GET, path: "/v1/gated", upstream: patient}
`

// upstreamRecorder is a real HTTP upstream that remembers the last request.
type upstreamRecorder struct {
	// arrived receives when a request to /v1/gated reaches the upstream,
	// which then answers only once release is closed.
	arrived chan struct{}
	release chan struct{}
	mu      sync.Mutex
	last    *http.Request
	body    []byte
	srv     *httptest.Server
}

func newUpstream(t testing.TB) *upstreamRecorder {
	u := &upstreamRecorder{arrived: make(chan struct{}, 16), release: make(chan struct{})}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.last, u.body = r.Clone(r.Context()), body
		u.mu.Unlock()
		switch r.URL.Path {
		case "/v1/gated":
			u.arrived <- struct{}{}
			<-u.release
		case "/v1/slow":
			select {
			case <-time.After(2 * time.Second):
			case <-r.Context().Done():
			}
		}
		w.Header().Set("X-Upstream", "yes")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("hello from upstream"))
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstreamRecorder) Last() (*http.Request, []byte) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.last, u.body
}

// deadURL returns the URL of a port that refuses connections.
func deadURL(t testing.TB) string {
	s := httptest.NewServer(http.NotFoundHandler())
	u := s.URL
	s.Close()
	return u
}

func writeConfig(t testing.TB, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func renderConfig(base, upstream, dead string) string {
	r := strings.NewReplacer("UPSTREAM", upstream, "DEADURL", dead,
		"FREEHASH", sha256Hex(freeKey), "ENTHASH", sha256Hex(enterpriseKey))
	return r.Replace(base)
}

func testGetenv(name string) (string, bool) {
	if name == "TEST_JWT_SECRET" {
		return jwtSecret, true
	}
	return "", false
}

const jwtSecret = "test-secret-0123456789abcdef0123456789"

type fixture struct {
	gw       *Gateway
	clock    *storetest.Clock
	upstream *upstreamRecorder
	path     string
}

// newFixture builds a gateway on the memory store with a test clock.
func newFixture(t *testing.T, base string) *fixture {
	t.Helper()
	f := &fixture{clock: newTestClock(), upstream: newUpstream(t)}
	f.path = writeConfig(t, renderConfig(base, f.upstream.srv.URL, deadURL(t)))
	cfg, err := config.Load(f.path, testGetenv)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	gw, err := New(cfg, Options{
		Now:    f.clock.Now,
		Getenv: testGetenv,
		OpenStore: func(c config.Store) (*stack.Stack, error) {
			return stack.New(nil, stack.Options{Now: f.clock.Now, FleetSize: c.FleetSize}), nil
		},
	})
	if err != nil {
		t.Fatalf("gateway: %v", err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	f.gw = gw
	return f
}

// do sends one request through the gateway's handler.
func (f *fixture) do(method, target string, hdr map[string]string, body io.Reader) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, body)
	r.RemoteAddr = "192.0.2.10:4321"
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	f.gw.ServeHTTP(w, r)
	return w
}

func bearer(k string) map[string]string { return map[string]string{"Authorization": "Bearer " + k} }

// problemBody decodes a problem+json answer and checks the members every
// error carries.
func problemBody(t *testing.T, w *httptest.ResponseRecorder, status int, code string) map[string]any {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status = %d, want %d; body %s", w.Code, status, w.Body.String())
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q", ct)
	}
	var m map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil {
		t.Fatalf("body is not JSON: %v: %s", err, w.Body.String())
	}
	if m["error"] != code {
		t.Fatalf("error = %v, want %s", m["error"], code)
	}
	for _, k := range []string{"type", "title", "status", "message", "request_id"} {
		if _, ok := m[k]; !ok {
			t.Fatalf("problem body lacks %q: %s", k, w.Body.String())
		}
	}
	if int(m["status"].(float64)) != status {
		t.Fatalf("body status %v != %d", m["status"], status)
	}
	return m
}
