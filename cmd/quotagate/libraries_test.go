package main

import (
	"bytes"
	"encoding/json"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
	"github.com/quotagate/quotagate/internal/syncbuf"
	"github.com/quotagate/quotagate/telemetry"
)

// TestGRPCLogThroughLogger: once the gateway's logger is set, gRPC's lines
// at or above GRPC_GO_LOG_SEVERITY_LEVEL (error when unset) go through it
// as one JSON record each, and the others nowhere.
func TestGRPCLogThroughLogger(t *testing.T) {
	prev := libraryLogger.Load()
	t.Cleanup(func() { libraryLogger.Store(prev) })
	for _, tc := range []struct {
		env  string
		want []string // levels logged for Info, Warning, Error
	}{
		{"", []string{"ERROR"}},
		{"bogus", []string{"ERROR"}},
		{"warning", []string{"WARN", "ERROR"}},
		{"INFO", []string{"INFO", "WARN", "ERROR"}},
	} {
		var buf syncbuf.Buffer
		libraryLogger.Store(telemetry.NewLogger(&buf, slog.LevelDebug))
		g := newGRPCLog(func(k string) string {
			if k == "GRPC_GO_LOG_SEVERITY_LEVEL" {
				return tc.env
			}
			return ""
		})
		g.Infof("i %d", 1)
		g.Warningln("w", 2)
		g.Error("e", 3)
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if line == "" {
				continue
			}
			var rec struct{ Level, Msg, Detail string }
			if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Msg != "grpc" || rec.Detail == "" {
				t.Fatalf("GRPC_GO_LOG_SEVERITY_LEVEL=%q: line %q (%v), want a JSON record grpc with a detail", tc.env, line, err)
			}
			got = append(got, rec.Level)
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("GRPC_GO_LOG_SEVERITY_LEVEL=%q: logged %v, want %v", tc.env, got, tc.want)
		}
	}
}

// blockedWriter never returns from Write until released.
type blockedWriter struct{ release chan struct{} }

func (b blockedWriter) Write(p []byte) (int, error) { <-b.release; return len(p), nil }

// TestBoundedWriter: a Write the destination takes returns what it
// returned; one it does not take returns an error once the bound has
// passed (an injected timer, fired by the test), not before.
func TestBoundedWriter(t *testing.T) {
	var buf bytes.Buffer
	if n, err := (boundedWriter{w: &buf, timeout: time.Hour}).Write([]byte("x\n")); n != 2 || err != nil || buf.String() != "x\n" {
		t.Errorf("Write to a reading destination: %d, %v, %q", n, err, buf.String())
	}
	stuck := blockedWriter{release: make(chan struct{})}
	defer close(stuck.release)
	fire := make(chan time.Time)
	asked := make(chan time.Duration, 1)
	b := boundedWriter{w: stuck, timeout: 3 * time.Second, after: func(d time.Duration) <-chan time.Time {
		asked <- d
		return fire
	}}
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := b.Write([]byte("x\n"))
		done <- result{n, err}
	}()
	select {
	case d := <-asked:
		if d != 3*time.Second {
			t.Errorf("the Write waits %v, want its bound of 3s", d)
		}
	case <-time.After(30 * time.Second):
		proctest.FatalOverrun(t, "the Write started no timer within 30s")
	}
	select {
	case r := <-done:
		t.Fatalf("Write to a stuck destination returned %d, %v before its bound passed", r.n, r.err)
	default:
	}
	fire <- time.Time{}
	select {
	case r := <-done:
		if r.n != 0 || r.err == nil {
			t.Errorf("Write to a stuck destination: %d, %v, want 0 and an error", r.n, r.err)
		}
	case <-time.After(30 * time.Second):
		proctest.FatalOverrun(t, "Write did not return within 30s of its bound passing")
	}
}

// TestStdLogThroughLogger: once the library logs are routed, an
// http.Server with no ErrorLog (as the Prometheus listener of
// OTEL_METRICS_EXPORTER=prometheus is) writes its errors through the
// gateway's logger, not to the standard log package's stderr, which a
// stuck stderr would hold the connection's goroutine on.
func TestStdLogThroughLogger(t *testing.T) {
	prevOut, prevFlags, prevPrefix := log.Writer(), log.Flags(), log.Prefix()
	prevLib := libraryLogger.Load()
	t.Cleanup(func() {
		log.SetOutput(prevOut)
		log.SetFlags(prevFlags)
		log.SetPrefix(prevPrefix)
		libraryLogger.Store(prevLib)
	})
	var buf syncbuf.Buffer
	routeLibraryLogs(telemetry.NewLogger(&buf, slog.LevelInfo))

	// A second WriteHeader makes net/http log "superfluous
	// response.WriteHeader call" to the server's ErrorLog, here the
	// standard logger, before the response is finished.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	line := strings.TrimSpace(buf.String())
	var rec struct{ Level, Msg string }
	if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Level != "WARN" ||
		!strings.Contains(rec.Msg, "superfluous response.WriteHeader") {
		t.Fatalf("logger got %q (%v), want one JSON warning with net/http's error as its message", line, err)
	}
}
