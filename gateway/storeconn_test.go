package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/internal/syncbuf"
	"github.com/quotagate/quotagate/ratelimit/stack"
)

// records returns the JSON log records at level.
func records(t *testing.T, s *syncbuf.Buffer, level string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(s.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["level"] == level {
			out = append(out, m)
		}
	}
	return out
}

// newStoreFixture builds a gateway of failureConfig on the Redis at addr,
// logging JSON to logs; password is read when the store is opened.
func newStoreFixture(t *testing.T, addr string, password *string, logs *syncbuf.Buffer) (*fixture, *config.Config) {
	t.Helper()
	f := &fixture{clock: newTestClock(), upstream: newUpstream(t)}
	text := strings.NewReplacer("REDIS", addr, "UPSTREAM", f.upstream.srv.URL).Replace(failureConfig)
	// These tests read what the store check says of the server (WRONGPASS,
	// a refused reply): give it a deadline that a loaded machine does not
	// turn into "no answer in time" before the server has spoken.
	text = strings.Replace(text, "timeout: 50ms", "timeout: 1s", 1)
	f.path = writeConfig(t, text)
	cfg, err := config.Load(f.path, testGetenv)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store.Redis.KeyPrefix = "gw" + strconv.FormatInt(time.Now().UnixNano(), 36)
	gw, err := New(cfg, Options{
		Now:       f.clock.Now,
		Logger:    slog.New(slog.NewJSONHandler(logs, nil)),
		OpenStore: func(c config.Store) (*stack.Stack, error) { return openRedisStack(c, *password, f.clock.Now), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	f.gw = gw
	return f, cfg
}

// checkStoreLine checks one ERROR record of checkStore: its error names
// want, and it lists failureConfig's policies by on_store_error.
func checkStoreLine(t *testing.T, rec map[string]any, want string) {
	t.Helper()
	if msg, _ := rec["msg"].(string); !strings.HasPrefix(msg, "store unreachable") {
		t.Fatalf("ERROR line %v is not the store check", rec)
	}
	if e, _ := rec["error"].(string); !strings.Contains(e, want) {
		t.Fatalf("store check error %q does not name %q", e, want)
	}
	for mode, policy := range map[string]string{"fail_open": "fail_open", "fail_closed": "fail_closed", "fail_local": "fail_local"} {
		if got, _ := rec[mode].([]any); len(got) != 1 || got[0] != policy {
			t.Fatalf("store check %s = %v, want [%s]", mode, rec[mode], policy)
		}
	}
}

// TestGatewayServesThroughHostileRedis puts a TCP server that answers
// every command with a reply declaring 2^31 elements in place of Redis.
// The gateway must keep answering per on_store_error (open 200, closed
// 503, local from this instance's share), log the cause at start, and
// allocate far less than one such reply would take.
func TestGatewayServesThroughHostileRedis(t *testing.T) {
	h := redistest.StartHostile(t, []byte("*2147483646\r\n"), "HELLO", "PING", "EVALSHA", "EVAL")
	var logs syncbuf.Buffer
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	password := ""
	f, _ := newStoreFixture(t, h.Addr, &password, &logs)
	errs := records(t, &logs, "ERROR")
	if len(errs) != 1 {
		t.Fatalf("%d ERROR lines at start, want 1: %v", len(errs), errs)
	}
	checkStoreLine(t, errs[0], "not a bounded Redis reply")

	for i := range 30 {
		if code, _, _ := f.timed("/open"); code != http.StatusOK {
			t.Fatalf("request %d to a fail-open route: %d, want 200", i, code)
		}
		if code, _, _ := f.timed("/closed"); code != http.StatusServiceUnavailable {
			t.Fatalf("request %d to a fail-closed route: %d, want 503", i, code)
		}
	}
	// fail_local: burst 4 over a fleet of 2 is 2 for this instance.
	for i, want := range []int{200, 200, 429} {
		if code, _, _ := f.timed("/local"); code != want {
			t.Fatalf("request %d to a fail-local route: %d, want %d", i, code, want)
		}
	}
	if h.Answered.Load() == 0 {
		t.Fatal("the hostile server never answered")
	}
	runtime.ReadMemStats(&after)
	grown := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %d KiB over %d hostile replies", grown>>10, h.Answered.Load())
	if grown > 64<<20 {
		t.Fatalf("allocated %d MiB: the declared replies were not refused before allocation", grown>>20)
	}
}

// TestGatewayLogsStoreFailureAtStartAndReload starts a gateway with the
// wrong password for a real Redis: one ERROR line names WRONGPASS and the
// policies failing open, closed and local; a reload logs it again; a
// reload that fixes the password logs nothing more and decides again.
func TestGatewayLogsStoreFailureAtStartAndReload(t *testing.T) {
	srv := redistest.StartStandaloneWith(t, redistest.Options{Password: "right"})
	var logs syncbuf.Buffer
	password := "wrong"
	f, cfg := newStoreFixture(t, srv.Addr, &password, &logs)
	errs := records(t, &logs, "ERROR")
	if len(errs) != 1 {
		t.Fatalf("%d ERROR lines at start, want 1: %v", len(errs), errs)
	}
	checkStoreLine(t, errs[0], "WRONGPASS")
	if code, _, _ := f.timed("/closed"); code != http.StatusServiceUnavailable {
		t.Fatalf("fail-closed route with the wrong password: %d, want 503", code)
	}

	if err := f.gw.Reload(cfg, time.Second); err != nil {
		t.Fatal(err)
	}
	if errs = records(t, &logs, "ERROR"); len(errs) != 2 {
		t.Fatalf("%d ERROR lines after a reload, want 2", len(errs))
	}
	checkStoreLine(t, errs[1], "WRONGPASS")

	password = "right"
	fixed := *cfg
	fixed.Store.Redis.KeyPrefix += "x" // a changed store section reopens the store
	if err := f.gw.Reload(&fixed, time.Second); err != nil {
		t.Fatal(err)
	}
	if errs = records(t, &logs, "ERROR"); len(errs) != 2 {
		t.Fatalf("%d ERROR lines after the fix, want still 2: %v", len(errs), errs[len(errs)-1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := f.gw.live.Load().store.Ping(ctx); err != nil {
		t.Fatalf("Ping after the fix: %v", err)
	}
	if code, _, _ := f.timed("/closed"); code != http.StatusOK {
		t.Fatalf("fail-closed route after the fix: %d, want 200", code)
	}
}
