package routes

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func TestKey(t *testing.T) {
	acme := HashID("acme")
	tests := []struct {
		scope     Scope
		policy    string
		algorithm string
		route     string
		subject   string
		want      string
	}{
		{ScopeTenant, "tenant", "token_bucket", "transfers.get", "acme", "qg:{t:" + acme + "}:tenant:tb"},
		{ScopeTenantRoute, "transfers", "fixed_window", "transfers.get", "acme", "qg:{t:" + acme + "}:transfers:transfers.get:fw"},
		{ScopeRoute, "per-route", "sliding_window", "transfers.get", "acme", "qg:{r:transfers.get}:per-route:transfers.get:sw"},
		{ScopeRoute, "per-route", "sliding_window", "transfers.get", "", "qg:{r:transfers.get}:per-route:transfers.get:sw"},
		{ScopeGlobal, "all", "sliding_log", "transfers.get", "acme", "qg:{g:all}:all:sl"},
		{ScopeGlobal, "all", "sliding_log", "", "", "qg:{g:all}:all:sl"},
	}
	for _, tt := range tests {
		got, err := Key("qg", tt.scope, tt.policy, tt.algorithm, tt.route, tt.subject)
		if err != nil || got != tt.want {
			t.Errorf("Key(%v, %q, %q, %q, %q) = %q, %v; want %q", tt.scope, tt.policy, tt.algorithm, tt.route, tt.subject, got, err, tt.want)
		}
	}
}

func TestKeyNeverHoldsSubject(t *testing.T) {
	for _, subject := range []string{"acme", "203.0.113.7", "2001:db8::1"} {
		for _, s := range []Scope{ScopeTenant, ScopeTenantRoute} {
			k, err := Key("qg", s, "p", "token_bucket", "r", subject)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(k, subject) {
				t.Errorf("key %q contains the subject %q", k, subject)
			}
		}
	}
}

// TestKeySameSlotPerTenant checks that a tenant's keys share one hash tag,
// and that two tenants do not.
func TestKeySameSlotPerTenant(t *testing.T) {
	a1, _ := Key("qg", ScopeTenant, "tenant", "token_bucket", "", "acme")
	a2, _ := Key("qg", ScopeTenantRoute, "transfers", "sliding_log", "transfers.create", "acme")
	b1, _ := Key("qg", ScopeTenant, "tenant", "token_bucket", "", "globex")
	if hashTag(a1) != hashTag(a2) {
		t.Errorf("tags of one tenant differ: %q, %q", a1, a2)
	}
	if hashTag(a1) == hashTag(b1) {
		t.Errorf("tags of two tenants equal: %q, %q", a1, b1)
	}
}

// hashTag returns the part of k between the first "{" and the next "}", as
// Redis Cluster does.
func hashTag(k string) string {
	i := strings.IndexByte(k, '{')
	j := strings.IndexByte(k[i+1:], '}')
	return k[i+1 : i+1+j]
}

// TestKeyDistinct checks that changing any one part of a key's inputs that
// the scope uses changes the key.
func TestKeyDistinct(t *testing.T) {
	seen := make(map[string]string)
	for _, scope := range []Scope{ScopeTenant, ScopeTenantRoute, ScopeRoute, ScopeGlobal} {
		for _, policy := range []string{"p", "q", "tb"} {
			for _, alg := range []string{"token_bucket", "fixed_window", "sliding_window", "sliding_log", "concurrency"} {
				for _, route := range []string{"r", "s", "tb"} {
					for _, subject := range []string{"acme", "globex"} {
						k, err := Key("qg", scope, policy, alg, route, subject)
						if err != nil {
							t.Fatal(err)
						}
						in := strings.Join([]string{scope.String(), policy, alg}, "|")
						if scope == ScopeTenantRoute || scope == ScopeRoute {
							in += "|" + route
						}
						if scope.PerSubject() {
							in += "|" + subject
						}
						if prev, ok := seen[k]; ok && prev != in {
							t.Errorf("key %q for both %s and %s", k, prev, in)
						}
						seen[k] = in
					}
				}
			}
		}
	}
}

func TestKeyErrors(t *testing.T) {
	tests := []struct {
		why                            string
		prefix                         string
		scope                          Scope
		policy, algorithm, route, subj string
		wantErr                        string
		wantIs                         error
	}{
		{"empty subject, tenant", "qg", ScopeTenant, "p", "token_bucket", "r", "", "", ErrEmptySubject},
		{"empty subject, tenant_route", "qg", ScopeTenantRoute, "p", "token_bucket", "r", "", "", ErrEmptySubject},
		{"empty route, tenant_route", "qg", ScopeTenantRoute, "p", "token_bucket", "", "acme", "route: empty name", nil},
		{"empty route, route", "qg", ScopeRoute, "p", "token_bucket", "", "", "route: empty name", nil},
		{"route with brace", "qg", ScopeRoute, "p", "token_bucket", "a}b", "", "character '}'", nil},
		{"route with colon", "qg", ScopeTenantRoute, "p", "token_bucket", "a:b", "x", "character ':'", nil},
		{"policy with colon", "qg", ScopeTenant, "a:b", "token_bucket", "", "x", "policy", nil},
		{"empty policy", "qg", ScopeGlobal, "", "token_bucket", "", "", "policy: empty name", nil},
		{"unknown algorithm", "qg", ScopeTenant, "p", "leaky", "", "x", "unknown algorithm", nil},
		{"algorithm code is not a name", "qg", ScopeTenant, "p", "tb", "", "x", "unknown algorithm", nil},
		{"zero scope", "qg", 0, "p", "token_bucket", "", "x", "invalid scope", nil},
		{"scope out of range", "qg", 9, "p", "token_bucket", "", "x", "invalid scope", nil},
		{"empty prefix", "", ScopeTenant, "p", "token_bucket", "", "x", "prefix", nil},
		{"prefix with brace", "q{g", ScopeTenant, "p", "token_bucket", "", "x", "prefix", nil},
		{"prefix with space", "q g", ScopeTenant, "p", "token_bucket", "", "x", "prefix", nil},
	}
	for _, tt := range tests {
		k, err := Key(tt.prefix, tt.scope, tt.policy, tt.algorithm, tt.route, tt.subj)
		if err == nil {
			t.Errorf("%s: Key = %q, want error", tt.why, k)
			continue
		}
		if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
			t.Errorf("%s: error %v, want errors.Is %v", tt.why, err, tt.wantIs)
		}
		if !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: error %v, want it to contain %q", tt.why, err, tt.wantErr)
		}
	}
}

func TestKeyPrefixMayHaveColons(t *testing.T) {
	k, err := Key("qg:prod", ScopeGlobal, "p", "token_bucket", "", "")
	if err != nil || k != "qg:prod:{g:p}:p:tb" {
		t.Errorf("Key = %q, %v", k, err)
	}
}

func TestHashID(t *testing.T) {
	sum := sha256.Sum256([]byte("acme"))
	want := hex.EncodeToString(sum[:])[:16]
	if got := HashID("acme"); got != want {
		t.Errorf("HashID(acme) = %q, want %q", got, want)
	}
	if HashID("") == "" || len(HashID("x")) != 16 {
		t.Error("HashID must always return 16 hex digits")
	}
}

func TestScope(t *testing.T) {
	for _, s := range []Scope{ScopeTenant, ScopeTenantRoute, ScopeRoute, ScopeGlobal} {
		got, err := ParseScope(s.String())
		if err != nil || got != s {
			t.Errorf("ParseScope(%q) = %v, %v; want %v", s.String(), got, err, s)
		}
	}
	for _, name := range []string{"", "Tenant", "tenant-route", "local"} {
		if s, err := ParseScope(name); err == nil {
			t.Errorf("ParseScope(%q) = %v, want error", name, s)
		}
	}
	if got := Scope(0).String(); got != "Scope(0)" {
		t.Errorf("Scope(0).String() = %q", got)
	}
	if got := Scope(7).String(); got != "Scope(7)" {
		t.Errorf("Scope(7).String() = %q", got)
	}
	if !ScopeTenant.PerSubject() || !ScopeTenantRoute.PerSubject() || ScopeRoute.PerSubject() || ScopeGlobal.PerSubject() {
		t.Error("PerSubject wrong")
	}
}

// TestKeyPattern checks that a pattern built once gives, for every scope,
// exactly the key Key gives, and that it refuses what Key refuses.
func TestKeyPattern(t *testing.T) {
	for _, scope := range []Scope{ScopeTenant, ScopeTenantRoute, ScopeRoute, ScopeGlobal} {
		for _, algorithm := range []string{"token_bucket", "fixed_window", "sliding_window", "sliding_log", "concurrency"} {
			p, err := NewKeyPattern("qg:prod", scope, "transfers", algorithm, "transfers.create")
			if err != nil {
				t.Fatal(err)
			}
			for _, subject := range []string{"acme", "ip:203.0.113.7", "ip:2001:db8::/64"} {
				want, err := Key("qg:prod", scope, "transfers", algorithm, "transfers.create", subject)
				if err != nil {
					t.Fatal(err)
				}
				got, err := p.Key(NewSubjectID(subject))
				if err != nil || got != want {
					t.Errorf("%v %s %q: pattern key %q, %v; Key %q", scope, algorithm, subject, got, err, want)
				}
			}
			_, err = p.Key(NewSubjectID(""))
			if scope.PerSubject() != errors.Is(err, ErrEmptySubject) {
				t.Errorf("%v: empty subject: err %v", scope, err)
			}
		}
	}
	if _, err := (KeyPattern{}).Key("abc"); err == nil {
		t.Error("the zero KeyPattern built a key")
	}
	for _, bad := range []struct {
		prefix, policy, algorithm, route string
		scope                            Scope
	}{
		{"", "p", "token_bucket", "r", ScopeTenant},
		{"qg", "a:b", "token_bucket", "r", ScopeTenant},
		{"qg", "p", "leaky", "r", ScopeTenant},
		{"qg", "p", "token_bucket", "", ScopeRoute},
		{"qg", "p", "token_bucket", "r", 0},
	} {
		if _, err := NewKeyPattern(bad.prefix, bad.scope, bad.policy, bad.algorithm, bad.route); err == nil {
			t.Errorf("NewKeyPattern(%+v) succeeded", bad)
		}
	}
}

// TestKeyPatternAllocs: with the subject hashed once per request, a key
// costs one allocation for per-subject scopes and none for the others.
func TestKeyPatternAllocs(t *testing.T) {
	id := NewSubjectID("acme")
	for scope, want := range map[Scope]float64{ScopeTenant: 1, ScopeTenantRoute: 1, ScopeRoute: 0, ScopeGlobal: 0} {
		p, err := NewKeyPattern("qg", scope, "transfers", "token_bucket", "transfers.create")
		if err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(100, func() { _, _ = p.Key(id) }); n > want {
			t.Errorf("%v: %v allocations per key, want at most %v", scope, n, want)
		}
	}
}

// TestKeyPatternBy: a dimension value goes before the algorithm's code,
// in the subject's hash slot; a part that could break a key is refused.
func TestKeyPatternBy(t *testing.T) {
	p, err := NewKeyPattern("qg", ScopeTenant, "tpm", "token_bucket", "chat")
	if err != nil {
		t.Fatal(err)
	}
	bp, err := p.By("model=gpt-4o")
	if err != nil {
		t.Fatal(err)
	}
	id := NewSubjectID("key:acme")
	k, _ := bp.Key(id)
	plain, _ := p.Key(id)
	if want := strings.TrimSuffix(plain, ":tb") + ":model=gpt-4o:tb"; k != want {
		t.Errorf("key %q, want %q", k, want)
	}
	g, _ := NewKeyPattern("qg", ScopeGlobal, "tpm", "token_bucket", "chat")
	if gb, _ := g.By("model=*"); mustKey(t, gb) != "qg:{g:tpm}:tpm:model=*:tb" {
		t.Errorf("global key %q", mustKey(t, gb))
	}
	for _, bad := range []string{"", "a:b", "a{b", "}"} {
		if _, err := p.By(bad); err == nil {
			t.Errorf("By(%q) accepted", bad)
		}
	}
}

func mustKey(t *testing.T, p KeyPattern) string {
	t.Helper()
	k, err := p.Key("")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestKeyPatternMatches: a pattern matches the keys it makes, of any
// subject, and not those of its dimension values (each has a pattern of
// its own), another policy's or another scope's.
func TestKeyPatternMatches(t *testing.T) {
	p, err := NewKeyPattern("qg", ScopeTenant, "quota", "token_bucket", "chat")
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewKeyPattern("qg", ScopeTenant, "quota2", "token_bucket", "chat")
	global, _ := NewKeyPattern("qg", ScopeGlobal, "quota", "token_bucket", "chat")
	by, _ := p.By("model=x")
	k1, _ := p.Key(NewSubjectID("key:acme"))
	k2, _ := by.Key(NewSubjectID("key:initech"))
	kg, _ := global.Key("")
	ko, _ := other.Key(NewSubjectID("key:acme"))
	for _, c := range []struct {
		p    KeyPattern
		key  string
		want bool
	}{{p, k1, true}, {p, k2, false}, {by, k2, true}, {by, k1, false}, {p, ko, false}, {other, k1, false},
		{global, kg, true}, {global, k1, false}, {p, kg, false}, {KeyPattern{}, "", false}} {
		if got := c.p.Matches(c.key); got != c.want {
			t.Errorf("%+v.Matches(%q) = %v, want %v", c.p, c.key, got, c.want)
		}
	}
}
