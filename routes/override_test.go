package routes

import (
	"net/http"
	"testing"
)

func TestOverride(t *testing.T) {
	tests := []struct {
		why    string
		header http.Header
		query  string
		want   string
	}{
		{"ordinary", http.Header{"Accept": {"*/*"}, "X-Request-Id": {"a"}, "X-Forwarded-For": {"1.2.3.4"}}, "a=1&b=2", ""},
		{"X-Original-URL", http.Header{"X-Original-Url": {"/v1/transfers/1"}}, "", "X-Original-Url"},
		{"X-Rewrite-URL", http.Header{"X-Rewrite-Url": {"/admin"}}, "", "X-Rewrite-Url"},
		{"X-Original-URI", http.Header{"X-Original-Uri": {"/admin"}}, "", "X-Original-Uri"},
		{"X-Override-URL", http.Header{"X-Override-Url": {"/admin"}}, "", "X-Override-Url"},
		{"X-Forwarded-URI", http.Header{"X-Forwarded-Uri": {"/admin"}}, "", "X-Forwarded-Uri"},
		{"X-Forwarded-Path", http.Header{"X-Forwarded-Path": {"/admin"}}, "", "X-Forwarded-Path"},
		{"X-Forwarded-Prefix", http.Header{"X-Forwarded-Prefix": {"/admin"}}, "", "X-Forwarded-Prefix"},
		{"method override", http.Header{"X-Http-Method-Override": {"DELETE"}}, "", "X-Http-Method-Override"},
		{"X-HTTP-Method", http.Header{"X-Http-Method": {"DELETE"}}, "", "X-Http-Method"},
		{"X-Method-Override", http.Header{"X-Method-Override": {"DELETE"}}, "", "X-Method-Override"},
		{"underscores", http.Header{"X_original_url": {"/admin"}}, "", "X_original_url"},
		{"mixed separators and case", http.Header{"x-HTTP_method-OVERRIDE": {"PUT"}}, "", "x-HTTP_method-OVERRIDE"},
		{"longer name is another header", http.Header{"X-Original-Urls": {"/"}}, "", ""},
		{"query _method", nil, "a=1&_method=DELETE", "_method"},
		{"query _METHOD", nil, "_METHOD=DELETE", "_METHOD"},
		{"query encoded underscore", nil, "%5Fmethod=DELETE", "%5Fmethod"},
		{"query encoded letter", nil, "_%6Dethod=DELETE", "_%6Dethod"},
		{"query dot for underscore", nil, ".method=DELETE", ".method"},
		{"query leading space is dropped", nil, "+method=DELETE", ""},
		{"query space for underscore", nil, "a=1&+.method=DELETE", "+.method"},
		{"query bracket for underscore", nil, "[method=DELETE", "[method"},
		{"query leading spaces", nil, "%20%20_method=DELETE", "%20%20_method"},
		{"query without value", nil, "_method", "_method"},
		{"query other keys", nil, "method=x&my_method=y&_methods=z&_metho=d", ""},
		{"query bad escape", nil, "%zz_method=1", ""},
	}
	for _, tt := range tests {
		got, ok := Override(tt.header, tt.query, false)
		if ok != (tt.want != "") || got != tt.want {
			t.Errorf("%s: Override = %q, %v; want %q", tt.why, got, ok, tt.want)
		}
	}
}

func TestOverrideFromTrustedProxy(t *testing.T) {
	for _, name := range []string{"X-Forwarded-Prefix", "X-Forwarded-Uri", "X_forwarded_path"} {
		if got, ok := Override(http.Header{name: {"/api"}}, "", true); ok {
			t.Errorf("%s from a trusted proxy: refused as %q", name, got)
		}
		if _, ok := Override(http.Header{name: {"/api"}}, "", false); !ok {
			t.Errorf("%s from another peer: not refused", name)
		}
	}
	h := http.Header{"X-Forwarded-Prefix": {"/api"}, "X-Original-Url": {"/admin"}}
	if got, ok := Override(h, "", true); !ok || got != "X-Original-Url" {
		t.Errorf("X-Original-URL beside a trusted X-Forwarded-Prefix: %q, %v; want refused", got, ok)
	}
	if got, ok := Override(nil, "_method=PUT", true); !ok || got != "_method" {
		t.Errorf("_method from a trusted proxy: %q, %v; want refused", got, ok)
	}
}

func TestOverrideAllocs(t *testing.T) {
	h := http.Header{"Accept": {"*/*"}, "Authorization": {"Bearer x"}, "X-Request-Id": {"a"},
		"X-Forwarded-For": {"1.2.3.4"}, "User-Agent": {"curl"}, "Content-Type": {"application/json"}}
	if n := testing.AllocsPerRun(100, func() { Override(h, "page=2&sort=-created&q=a%20b", false) }); n != 0 {
		t.Errorf("Override of an ordinary request: %v allocations, want 0", n)
	}
}
