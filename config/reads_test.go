package config

import (
	"os"
	"strings"
	"testing"
)

// readsConfig is testdata/minimal.yaml with a server section of extra.
func readsConfig(t *testing.T, server string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return "server:\n" + server + "\n" + string(b)
}

func TestQuotaReadsDefaults(t *testing.T) {
	want := QuotaReads{Rate: DefaultQuotaReadRate, Burst: DefaultQuotaReadBurst, MaxItems: DefaultQuotaReadMaxItems}
	c := mustParse(t, readsConfig(t, "  listen: 127.0.0.1:8080"), noEnv)
	if c.Server.QuotaReads != nil || c.Server.Reads() != want {
		t.Fatalf("absent: %+v, Reads %+v; want nil and %+v", c.Server.QuotaReads, c.Server.Reads(), want)
	}
	c = mustParse(t, readsConfig(t, "  quota_reads: {rate: 5}"), noEnv)
	if got := c.Server.Reads(); got != (QuotaReads{Rate: 5, Burst: DefaultQuotaReadBurst, MaxItems: DefaultQuotaReadMaxItems}) {
		t.Fatalf("rate only: %+v", got)
	}
	c = mustParse(t, readsConfig(t, "  quota_reads: {rate: 10000, burst: 1, max_items: 1000}"), noEnv)
	if got := c.Server.Reads(); got != (QuotaReads{Rate: 10000, Burst: 1, MaxItems: 1000}) {
		t.Fatalf("bounds: %+v", got)
	}
	// From the environment, with no section in the file.
	c = mustParse(t, readsConfig(t, "  listen: 127.0.0.1:8080"), env(map[string]string{
		"QUOTAGATE_SERVER_QUOTA_READS_BURST": "7", "QUOTAGATE_SERVER_QUOTA_READS_MAX_ITEMS": "3"}))
	if got := c.Server.Reads(); got != (QuotaReads{Rate: DefaultQuotaReadRate, Burst: 7, MaxItems: 3}) {
		t.Fatalf("from the environment: %+v", got)
	}
}

// TestQuotaReadsInvalid: each value out of range is an error naming its
// path (and its variable when it came from one); an unknown key too.
func TestQuotaReadsInvalid(t *testing.T) {
	for _, c := range []struct {
		server string
		env    map[string]string
		want   []string
	}{
		{"  quota_reads: {rate: 0}", nil, []string{"server.quota_reads.rate: must be a whole number from 1 to 10000, got 0"}},
		{"  quota_reads: {burst: -1, max_items: 1001}", nil, []string{
			"server.quota_reads.burst: must be a whole number from 1 to 10000, got -1",
			"server.quota_reads.max_items: must be a whole number from 1 to 1000, got 1001"}},
		{"  quota_reads: {rate: 1.5}", nil, []string{"server.quota_reads.rate: must be a whole number"}},
		{"  quota_reads: {rates: 1}", nil, []string{`server.quota_reads.rates: unknown key (did you mean "rate"?)`}},
		{"  quota_reads: 5", nil, []string{"server.quota_reads: must be a mapping"}},
		{"  listen: 127.0.0.1:8080", map[string]string{"QUOTAGATE_SERVER_QUOTA_READS_RATE": "10001"},
			[]string{"server.quota_reads.rate: must be a whole number from 1 to 10000, got 10001 (from QUOTAGATE_SERVER_QUOTA_READS_RATE)"}},
	} {
		_, err := Parse([]byte(readsConfig(t, c.server)), env(c.env))
		if err == nil {
			t.Errorf("%q %v: loaded, want an error", c.server, c.env)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q %v: %v\nwant %q", c.server, c.env, err, w)
			}
		}
	}
}
