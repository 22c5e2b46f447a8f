package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/quotagate/quotagate/internal/redistest"
)

// readyz calls /readyz of f's admin handler and decodes its body.
func (f *fixture) readyz(t *testing.T) (int, map[string]any) {
	t.Helper()
	w := httptest.NewRecorder()
	f.gw.Admin(http.NotFoundHandler()).ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
	var body map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("/readyz body %q: %v", w.Body.String(), err)
	}
	return w.Code, body
}

// names returns body[field] as strings (nil when absent).
func names(body map[string]any, field string) []string {
	list, _ := body[field].([]any)
	var out []string
	for _, v := range list {
		s, _ := v.(string)
		out = append(out, s)
	}
	return out
}

// TestReadyzFollowsOnStoreError: with Redis stopped, a gateway whose
// enforced policies all fall back (open, local) keeps serving, so /readyz
// answers 200 "degraded" and names the store's state; a closed policy —
// but not a shadow one, which denies nobody — makes it 503. With Redis up
// both are plain "ready".
func TestReadyzFollowsOnStoreError(t *testing.T) {
	// failureConfig with its closed policy in shadow mode and another
	// closed one no route uses.
	fallbackOnly := strings.NewReplacer(
		"fail_closed: {on_store_error: closed,", "fail_closed: {on_store_error: closed, shadow: true,",
		"policies:\n", "policies:\n  unused: {on_store_error: closed, limits: {\"*\": {rate: 1, per: 1h, burst: 1}}}\n",
	).Replace(failureConfig)
	srv := redistest.StartStandalone(t)
	degradable := newRedisFixtureWith(t, srv, fallbackOnly)
	strict := newRedisFixture(t, srv)
	for _, f := range []*fixture{degradable, strict} {
		if code, body := f.readyz(t); code != http.StatusOK || body["status"] != "ready" || body["store"] != nil {
			t.Fatalf("Redis up: /readyz = %d %v, want 200 ready", code, body)
		}
	}

	srv.Kill()
	code, body := degradable.readyz(t)
	if code != http.StatusOK || body["status"] != "degraded" || body["store"] != "store unreachable" {
		t.Errorf("Redis stopped, only open/local policies: /readyz = %d %v, want 200 degraded, store unreachable", code, body)
	}
	if got := names(body, "fail_open"); !slices.Equal(got, []string{"fail_open"}) {
		t.Errorf("fail_open = %v, want [fail_open]", got)
	}
	if got := names(body, "fail_local"); !slices.Equal(got, []string{"fail_local"}) {
		t.Errorf("fail_local = %v, want [fail_local]", got)
	}
	if got := names(body, "fail_closed"); len(got) != 0 {
		t.Errorf("fail_closed = %v, want none (the shadow policy and the unused one deny nobody)", got)
	}
	// It does serve: the open policy admits, the local one its share.
	for _, path := range []string{"/open", "/closed", "/local"} {
		if code, _, _ := degradable.timed(path); code != http.StatusOK {
			t.Errorf("%s with Redis stopped: %d, want 200", path, code)
		}
	}

	code, body = strict.readyz(t)
	if code != http.StatusServiceUnavailable || !strings.HasPrefix(body["status"].(string), "store ") {
		t.Errorf("Redis stopped, a closed policy: /readyz = %d %v, want 503 naming the store", code, body)
	}
	if got := names(body, "fail_closed"); !slices.Equal(got, []string{"fail_closed"}) {
		t.Errorf("fail_closed = %v, want [fail_closed]", got)
	}

	// The breaker open (every domain) is the same rule, without a PING.
	for i := 0; i < 5; i++ {
		degradable.timed("/open")
	}
	if code, body := degradable.readyz(t); code != http.StatusOK || body["status"] != "degraded" || body["store"] != "store circuit open" {
		t.Errorf("breaker open, only open/local policies: /readyz = %d %v, want 200 degraded, store circuit open", code, body)
	}
}
