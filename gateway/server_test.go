package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
)

// serve runs f's gateway on real listeners and returns the public and admin
// base URLs and a function that stops it and returns Serve's result.
func (f *fixture) serve(t *testing.T) (pub, admin string, stop func() error) {
	t.Helper()
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	al, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.gw.Serve(ctx, pl, al, f.gw.Admin(nil)) }()
	var once sync.Once
	var result error
	stop = func() error {
		once.Do(func() { cancel(); result = <-done })
		return result
	}
	t.Cleanup(func() { _ = stop() })
	return "http://" + pl.Addr().String(), "http://" + al.Addr().String(), stop
}

func TestOversizedHeadersAre431(t *testing.T) {
	cfg := strings.Replace(baseConfig, "max_body_bytes: 1024", "max_body_bytes: 1024\n  max_header_bytes: 4096", 1)
	f := newFixture(t, cfg)
	pub, _, _ := f.serve(t)
	req, _ := http.NewRequest("GET", pub+"/v1/open", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 64<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status = %d, want 431", resp.StatusCode)
	}
}

func TestShutdownDrainsInFlightRequests(t *testing.T) {
	f := newFixture(t, baseConfig)
	pub, _, stop := f.serve(t)
	type result struct {
		status int
		body   string
		err    error
	}
	res := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest("GET", pub+"/v1/gated", nil)
		req.Header.Set("X-API-Key", enterpriseKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			res <- result{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- result{status: resp.StatusCode, body: string(b)}
	}()
	<-f.upstream.arrived // the request is in flight at the upstream
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	// New connections are refused once shutdown began.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", strings.TrimPrefix(pub, "http://"), 200*time.Millisecond)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			proctest.FatalOverrun(t, "the listener still accepted connections 5 s after shutdown began")
		}
		time.Sleep(10 * time.Millisecond) // polling the listener's state, not synchronizing
	}
	close(f.upstream.release)
	r := <-res
	if r.err != nil || r.status != http.StatusOK || r.body != "hello from upstream" {
		t.Fatalf("in-flight request: %+v", r)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Serve returned %v after a clean drain", err)
	}
}

func TestAdminEndpoints(t *testing.T) {
	f := newFixture(t, baseConfig)
	_, admin, _ := f.serve(t)
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/config": 200, "/nope": 404} {
		resp, err := http.Get(admin + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", path, resp.StatusCode, want)
		}
		if path == "/config" {
			for _, secret := range []string{sha256Hex(freeKey), sha256Hex(enterpriseKey), jwtSecret} {
				if strings.Contains(string(b), secret) {
					t.Errorf("/config leaks a secret or key hash: %s", b)
				}
			}
		}
	}
}

func TestReloadUnderTrafficFailsNoRequest(t *testing.T) {
	f := newFixture(t, baseConfig)
	other := strings.Replace(renderConfig(baseConfig, f.upstream.srv.URL, deadURL(t)),
		"enterprise: {rate: 100, per: 1s, burst: 100}", "enterprise: {rate: 1000, per: 1s, burst: 1000}", 1)
	original, err := os.ReadFile(f.path)
	if err != nil {
		t.Fatal(err)
	}
	var failed, total atomic.Int64
	var firstFailure atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				w := f.do("GET", "/v1/open", bearer(enterpriseKey), nil)
				total.Add(1)
				if w.Code != http.StatusOK {
					failed.Add(1)
					firstFailure.CompareAndSwap(nil, strconv.Itoa(w.Code)+" "+w.Body.String())
				}
			}
		}()
	}
	for i := 0; i < 20; i++ {
		text := original
		if i%2 == 0 {
			text = []byte(other)
		}
		if err := os.WriteFile(f.path, text, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := f.gw.ReloadFile(f.path); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
	}
	close(stop)
	wg.Wait()
	if failed.Load() != 0 || total.Load() == 0 {
		t.Fatalf("%d of %d requests failed during reloads; first: %v", failed.Load(), total.Load(), firstFailure.Load())
	}
}

func TestInvalidReloadKeepsOldLimits(t *testing.T) {
	f := newFixture(t, baseConfig)
	before := f.do("GET", "/v1/transfers/1", bearer(freeKey), nil).Header().Get("RateLimit-Policy")
	if err := os.WriteFile(f.path, []byte("policies:\n  tenant:\n    limts: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.gw.ReloadFile(f.path); err == nil {
		t.Fatal("a broken config was accepted")
	}
	w := f.do("GET", "/v1/transfers/1", bearer(freeKey), nil)
	if w.Code != http.StatusOK || w.Header().Get("RateLimit-Policy") != before {
		t.Fatalf("after a rejected reload: %d %q, want %q", w.Code, w.Header().Get("RateLimit-Policy"), before)
	}
}

func TestReloadKeepsLocalStateOfUnchangedTiers(t *testing.T) {
	f := newFixture(t, baseConfig)
	for i := 0; i < 5; i++ { // the anonymous local burst is 5
		f.do("GET", "/v1/open", nil, nil)
	}
	changed := strings.Replace(renderConfig(baseConfig, f.upstream.srv.URL, deadURL(t)),
		"enterprise: {rate: 100, per: 1s, burst: 100}", "enterprise: {rate: 50, per: 1s, burst: 50}", 1)
	if err := os.WriteFile(f.path, []byte(changed), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.gw.ReloadFile(f.path); err != nil {
		t.Fatal(err)
	}
	w := f.do("GET", "/v1/open", nil, nil)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("a reload handed the anonymous caller a fresh local burst: %d", w.Code)
	}
}

func TestAdminHotKeysShowsTheBusiestKeyHashed(t *testing.T) {
	f := newFixture(t, baseConfig)
	_, admin, _ := f.serve(t)
	// Before any decision the list is empty: [], not null.
	var empty map[string]json.RawMessage
	if a := adminGet(t, admin+"/hotkeys", ""); json.Unmarshal([]byte(a.body), &empty) != nil || string(empty["keys"]) != "[]" {
		t.Errorf("GET /hotkeys before any decision: %d %s, want an empty keys list", a.code, a.body)
	}
	// The summary samples about 1 decision in 16 at random: 400 requests
	// leave a chance of about 1e-11 that none is sampled.
	for i := 0; i < 400; i++ {
		f.do("GET", "/v1/transfers/1", bearer(enterpriseKey), nil)
	}
	f.do("GET", "/v1/transfers/1", bearer(freeKey), nil)
	resp, err := http.Get(admin + "/hotkeys")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Keys []struct {
			Key       string  `json:"key"`
			PerSecond float64 `json:"per_second"`
		} `json:"keys"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if len(body.Keys) == 0 || !strings.Contains(body.Keys[0].Key, "{t:") || !strings.HasSuffix(body.Keys[0].Key, ":tenant:tb") {
		t.Fatalf("hot keys = %+v", body.Keys)
	}
	for _, k := range body.Keys {
		if strings.Contains(k.Key, "bigco") || strings.Contains(k.Key, "acme") {
			t.Fatalf("hot key %q names a tenant", k.Key)
		}
	}
}
