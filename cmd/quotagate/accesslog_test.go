package main

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/quotagate/quotagate/internal/proctest"
)

// TestBinaryAccessLinesFlushedOnShutdown: every answered request's access
// line reaches stderr, whole and valid JSON, by the time the process has
// exited after SIGTERM, and none was dropped.
func TestBinaryAccessLinesFlushedOnShutdown(t *testing.T) {
	const cfg = `server: {listen: 127.0.0.1:0, admin_listen: 127.0.0.1:0}
identity: {anonymous: {tier: anonymous}}
tiers: {anonymous: {}}
upstreams: {echo: {url: "echo:"}}
routes: [{name: echo, method: GET, path: /echo, upstream: echo}]
`
	proc := startBinary(t, cfg)
	const n = 40
	for range n {
		resp, err := http.Get(proc.URL() + "/echo")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if !regexp.MustCompile(`(?m)^quotagate_log_lines_dropped_total(\{[^}]*\})? 0$`).MatchString(proc.Metrics()) {
		t.Errorf("/metrics lacks quotagate_log_lines_dropped_total at 0")
	}
	proc.Signal(syscall.SIGTERM)
	if err := proc.Wait(proctest.StopTimeout); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	lines := 0
	for _, l := range strings.Split(proc.Logs.String(), "\n") {
		if !strings.Contains(l, `"msg":"request"`) {
			continue
		}
		var v struct {
			Msg, Route, Method string
			Status             int
		}
		if err := json.Unmarshal([]byte(l), &v); err != nil || v.Route != "echo" || v.Method != "GET" || v.Status != 200 {
			t.Errorf("access line %q: %+v %v", l, v, err)
		}
		lines++
	}
	if lines != n {
		t.Errorf("%d access lines after shutdown, want %d; log:\n%s", lines, n, proc.Logs.Tail(10))
	}
}
