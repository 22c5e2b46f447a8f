package main

import (
	"slices"
	"testing"
)

func TestDocDefault(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"Listen is the gateway's host:port (default 127.0.0.1:8080). Port 0", "127.0.0.1:8080"},
		{"MaxBodyBytes bounds a request body (default 10 MiB). It is", "10 MiB"},
		{"bounds the stage 1 limiters kept per tier (default 1,000,000).", "1,000,000"},
		{"TTL is how long (default 15s, at least 300ms).", "15s"},
		{"(a crashed instance): default 30s, at least 1s.", "30s"},
		{"MaxBlock is the most units (default 50; with Auto, default 0: no bound", "50"},
		{"Pprof serves Go's profiles (default false: 404).", "false"},
		{"the rate check off. Default 1024; a written 0", "1024"},
		{"QuotaPath is where (default \"/_quota\"; see", `"/_quota"`},
		{`UpstreamExchanges is how: "direct" (default) writes each`, `"direct"`},
		{`Kind is "memory" (embedded, this instance only; the default) or "redis"`, `"memory"`},
		{"Level is debug, info (the default), warn or error.", "info"},
		{"OnStoreError is: open (allow; the default), closed", "open"},
		{"Empty (the default) means iss is not checked", "Empty"},
		{"0 or left out means 64 (Validate sets it).", "64"},
		{"Absent or 0 means store.fleet_size; Validate fills it in.", "store.fleet_size"},
		{"left out (or written empty) means DefaultJWTClockSkew; a written", "DefaultJWTClockSkew"},
		{"so it is required when json is set; otherwise it defaults to Reserve.", "Reserve"},
		{"Default DefaultRLSShutdownDelay when left out; a written 0s", "DefaultRLSShutdownDelay"},
		{"A key written with an empty value counts as not written: the default applies.", ""},
		{"Buckets is the number of buckets (0: the default).", ""},
		{"RLS is the decision service; off by default.", ""},
	} {
		got, _ := docDefault(tc.doc)
		if got != tc.want {
			t.Errorf("docDefault(%q) = %q, want %q", tc.doc, got, tc.want)
		}
	}
}

func TestListedValues(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want []string
	}{
		{`must be "memory" or "redis", got %q`, []string{"memory", "redis"}},
		{"must be debug, info, warn or error, got %q", []string{"debug", "info", "warn", "error"}},
		{"must be one of %s, got %q", nil},
		{"must be > 0, got %d", nil},
		{"must be at least %s, got %s", nil},
	} {
		if got := listedValues(tc.msg); !slices.Equal(got, tc.want) {
			t.Errorf("listedValues(%q) = %q, want %q", tc.msg, got, tc.want)
		}
	}
}
