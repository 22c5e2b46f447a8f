package rls

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

// loadTestdata loads every valid descriptor file of testdata.
func loadTestdata(t testing.TB) *Rules {
	t.Helper()
	paths, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	rs, err := LoadFiles(paths)
	if err != nil {
		t.Fatalf("LoadFiles: %v", err)
	}
	return rs
}

func entries(kv ...string) []Entry {
	es := make([]Entry, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, Entry{Key: kv[i], Value: kv[i+1]})
	}
	return es
}

func TestMatchMostSpecific(t *testing.T) {
	rs := loadTestdata(t)
	if rs.Domains() != 3 {
		t.Fatalf("Domains() = %d, want 3", rs.Domains())
	}
	edge := rs.Domain("edge")
	cases := []struct {
		entries []Entry
		path    string // "" = no rule
	}{
		{entries("remote_address", "192.0.2.7"), "edge.remote_address"},
		{entries("remote_address", "10.0.0.1"), "edge.remote_address_10.0.0.1"},
		{entries("client", "c1"), ""}, // the client level has no limit of its own
		{entries("client", "c1", "path", "/login"), "edge.client.path_/login"},
		{entries("client", "c1", "path", "/other"), "edge.client.path"},
		{entries("client", "c1", "path", "/other", "method", "POST"), "edge.client.path.method_POST"},
		{entries("client", "c1", "path", "/other", "method", "GET"), ""},
		{entries("client", "c1", "path", "/login", "method", "POST"), ""}, // /login has no children
		{entries("plan", "gold"), "edge.plan_gold"},
		{entries("plan", "free"), "edge.plan"},
		{entries("api_path", "/v1/users"), "edge.api_path_/v1/*"},
		{entries("api_path", "/v2/a/b/items"), "edge.api_path_/v2/*/items"},
		{entries("api_path", "/v2/items"), ""}, // too short for "/v2/" + "/items"
		{entries("nothing", "here"), ""},
		{entries("report", "yearly"), "edge.report_yearly"},
	}
	for _, c := range cases {
		r, _ := edge.Match(c.entries)
		got := ""
		if r != nil {
			got = r.Path
		}
		if got != c.path {
			t.Errorf("Match(%v) = %q, want %q", c.entries, got, c.path)
		}
	}
}

func TestParsedRules(t *testing.T) {
	rs := loadTestdata(t)
	edge := rs.Domain("edge")
	rule := func(d *Domain, kv ...string) *Rule {
		t.Helper()
		r, _ := d.Match(entries(kv...))
		if r == nil {
			t.Fatalf("no rule for %v", kv)
		}
		return r
	}
	if r := rule(edge, "client", "c", "path", "/x", "method", "POST"); r.Unit != Hour || r.RequestsPerUnit != 100 ||
		r.Algorithm != ratelimit.FixedWindow || r.Limit != (ratelimit.Limit{Rate: 100, Per: time.Hour}) {
		t.Errorf("unit HOUR (upper case, as the RLS enum) = %+v", r)
	}
	if r := rule(edge, "remote_address", "10.0.0.1"); !r.Unlimited {
		t.Errorf("unlimited rule = %+v", r)
	}
	if r := rule(edge, "experiment", "new_quota"); !r.Shadow {
		t.Errorf("shadow_mode not set: %+v", r)
	}
	if r := rule(edge, "quota_bucket", "primary"); !r.Quota {
		t.Errorf("quota_mode not set: %+v", r)
	}
	if r := rule(edge, "plan", "gold"); r.Name != "plan_gold" || len(r.Replaces) != 1 || r.Replaces[0] != "plan_default" {
		t.Errorf("name/replaces = %+v", r)
	}
	if r := rule(edge, "client_class", "abusive"); !r.banned() {
		t.Errorf("requests_per_unit 0 is not banned: %+v", r)
	}
	for v, per := range map[string]time.Duration{"weekly": 7 * 24 * time.Hour, "monthly": 30 * 24 * time.Hour, "yearly": 365 * 24 * time.Hour} {
		if r := rule(edge, "report", v); r.Limit.Per != per {
			t.Errorf("%s: per = %v, want %v", v, r.Limit.Per, per)
		}
	}
	_, values := edge.Match(entries("api_path", "/v2/a/items"))
	if len(values) != 1 || values[0] != "/v2/*/items" {
		t.Errorf("share_threshold values = %q, want the pattern", values)
	}
	if _, values := edge.Match(entries("api_path", "/v1/a")); values != nil {
		t.Errorf("wildcard without share_threshold values = %q, want nil", values)
	}

	api := rs.Domain("api")
	if r := rule(api, "tenant", "t"); r.Algorithm != ratelimit.TokenBucket || r.Limit != (ratelimit.Limit{Rate: 600, Per: time.Minute, Burst: 50}) || r.OnStoreError != "local" {
		t.Errorf("token bucket extension = %+v", r)
	}
	if r := rule(api, "tenant", "t", "operation", "export"); r.Algorithm != ratelimit.SlidingWindow || r.OnStoreError != "closed" {
		t.Errorf("sliding window extension = %+v", r)
	}
}

func TestLoadFilesDuplicateDomain(t *testing.T) {
	_, err := LoadFiles([]string{"testdata/edge.yaml", "testdata/edge.yaml", "testdata/missing.yaml"})
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, want := range []string{
		`testdata/edge.yaml: domain: domain "edge" is already defined in testdata/edge.yaml`,
		"testdata/missing.yaml",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	var pe *ParseError
	if !errors.As(err, &pe) {
		t.Errorf("%T is not a *ParseError", err)
	}
}

func TestWildMatch(t *testing.T) {
	cases := []struct {
		pattern, value string
		want           bool
	}{
		{"a*", "a", true}, {"a*", "abc", true}, {"a*", "ba", false},
		{"*z", "xyz", true}, {"a*b*c", "abc", true}, {"a*b*c", "axxbyyc", true},
		{"a*b*c", "acb", false}, {"ab*ba", "aba", false}, {"*", "", true},
	}
	for _, c := range cases {
		if got := wildMatch(strings.Split(c.pattern, "*"), c.value); got != c.want {
			t.Errorf("wildMatch(%q, %q) = %v, want %v", c.pattern, c.value, got, c.want)
		}
	}
}
