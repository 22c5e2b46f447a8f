package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestQuickStart runs the binary on the shipped config.yaml, as the README's
// run command does (only the ports are moved, through the documented
// environment overrides), and walks the README's curl session: anonymous
// requests turn from 200 into 429 with the contract's headers and body.
func TestQuickStart(t *testing.T) {
	proc := startBinary(t, "../../config.yaml",
		"QUOTAGATE_SERVER_LISTEN=127.0.0.1:0", "QUOTAGATE_SERVER_ADMIN_LISTEN=127.0.0.1:0")

	var codes []int
	var last *http.Response
	var lastBody []byte
	for i := 0; i < 8; i++ {
		resp, err := http.Get(proc.URL() + "/v1/transfers/42")
		if err != nil {
			t.Fatal(err)
		}
		lastBody, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		last = resp
	}
	if codes[0] != 200 || codes[7] != 429 {
		t.Fatalf("statuses %v: want 200s turning into 429s", codes)
	}
	if last.Header.Get("Retry-After") == "" || !strings.HasPrefix(last.Header.Get("RateLimit-Policy"), `"tenant"`) {
		t.Fatalf("429 headers: %v", last.Header)
	}
	var body map[string]any
	if err := json.Unmarshal(lastBody, &body); err != nil || body["error"] != "rate_limited" || body["policy"] != "tenant" {
		t.Fatalf("429 body: %s", lastBody)
	}

	// The demo API key from the config's comments works.
	req, _ := http.NewRequest("POST", proc.URL()+"/v1/transfers/42", nil)
	req.Header.Set("Authorization", "Bearer demo-free-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"tenant"`) {
		t.Fatalf("demo-free-key: %d %s", resp.StatusCode, b)
	}

	if m := proc.Metrics(); !strings.Contains(m, `quotagate_decisions_total{policy="tenant",result="denied",stage="global"}`) {
		t.Fatalf("/metrics lacks the denial counter:\n%s", m)
	}
	if code, out, errs := runCmd(t, "healthcheck", "-url", proc.AdminURL()+"/readyz"); code != 0 {
		t.Fatalf("healthcheck: exit %d %s %s", code, out, errs)
	}
	if err := proc.Stop(); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}
