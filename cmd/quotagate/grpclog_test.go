//go:build !norls

package main

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

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
