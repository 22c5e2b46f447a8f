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
