package routes

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Scope says whose requests share one policy's state. The zero value is
// invalid.
type Scope uint8

const (
	// ScopeTenant: one state per subject (tenant or client address), shared
	// by all its routes.
	ScopeTenant Scope = iota + 1
	// ScopeTenantRoute: one state per subject and route.
	ScopeTenantRoute
	// ScopeRoute: one state per route, shared by all subjects.
	ScopeRoute
	// ScopeGlobal: one state per policy, shared by everything.
	ScopeGlobal
)

var scopeNames = [...]string{
	ScopeTenant:      "tenant",
	ScopeTenantRoute: "tenant_route",
	ScopeRoute:       "route",
	ScopeGlobal:      "global",
}

// String returns the configuration name of s, such as "tenant_route".
func (s Scope) String() string {
	if s == 0 || int(s) >= len(scopeNames) {
		return fmt.Sprintf("Scope(%d)", uint8(s))
	}
	return scopeNames[s]
}

// ParseScope maps a configuration name ("tenant", "tenant_route", "route",
// "global") to a Scope. The empty string is an error; defaults are the
// caller's business.
func ParseScope(name string) (Scope, error) {
	for s, n := range scopeNames {
		if n != "" && n == name {
			return Scope(s), nil
		}
	}
	return 0, fmt.Errorf("must be tenant, tenant_route, route or global, got %q", name)
}

// Valid reports whether s is one of the defined scopes.
func (s Scope) Valid() bool { return s != 0 && int(s) < len(scopeNames) }

// MarshalText returns the configuration name of s; an invalid s is an error.
func (s Scope) MarshalText() ([]byte, error) {
	if !s.Valid() {
		return nil, fmt.Errorf("routes: invalid %s", s)
	}
	return []byte(s.String()), nil
}

// UnmarshalText sets s from a configuration name (see ParseScope).
func (s *Scope) UnmarshalText(b []byte) error {
	v, err := ParseScope(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// PerSubject reports whether keys of scope s depend on the subject; such
// keys of one subject all share one hash tag, hence one Redis slot.
func (s Scope) PerSubject() bool { return s == ScopeTenant || s == ScopeTenantRoute }

// algorithmCodes maps configuration names of algorithms to the short codes
// that end a key.
var algorithmCodes = map[string]string{
	"token_bucket":   "tb",
	"fixed_window":   "fw",
	"sliding_window": "sw",
	"sliding_log":    "sl",
	"concurrency":    "cc",
}

// ErrEmptySubject is returned by Key for a per-subject scope without a
// subject: one bucket shared by every unidentified caller would be wrong.
var ErrEmptySubject = errors.New("routes: empty subject for a per-subject scope")

// Key returns the store key of policy for one request; the format is in the
// package documentation. algorithm is a configuration name
// ("token_bucket", "fixed_window", "sliding_window", "sliding_log",
// "concurrency"). route
// is used by the tenant_route and route scopes and ignored by the others;
// subject (a tenant name or client address, never stored in clear) is used
// by tenant and tenant_route and ignored by the others.
//
// prefix is 1 to 64 letters, digits, '.', '_', '-' or ':'; policy and route
// must pass ValidateName. An invalid argument, or an empty subject for a
// per-subject scope (ErrEmptySubject), is an error.
//
// Key checks its arguments and hashes the subject on every call. On a
// request path, build a KeyPattern per policy and route once, and a
// SubjectID per request, instead.
func Key(prefix string, scope Scope, policy, algorithm, route, subject string) (string, error) {
	code, err := checkKey(prefix, scope, policy, algorithm, route)
	if err != nil {
		return "", err
	}
	if scope.PerSubject() && subject == "" {
		return "", ErrEmptySubject
	}
	var b strings.Builder
	b.Grow(len(prefix) + len(policy) + len(route) + 32)
	b.WriteString(prefix)
	b.WriteString(":{")
	switch scope {
	case ScopeTenant, ScopeTenantRoute:
		b.WriteString("t:")
		b.WriteString(HashID(subject))
	case ScopeRoute:
		b.WriteString("r:")
		b.WriteString(route)
	case ScopeGlobal:
		b.WriteString("g:")
		b.WriteString(policy)
	}
	b.WriteString("}:")
	b.WriteString(policy)
	if scope == ScopeTenantRoute || scope == ScopeRoute {
		b.WriteByte(':')
		b.WriteString(route)
	}
	b.WriteByte(':')
	b.WriteString(code)
	return b.String(), nil
}

// checkKey checks the arguments of Key other than the subject and returns
// the algorithm's code.
func checkKey(prefix string, scope Scope, policy, algorithm, route string) (code string, err error) {
	if err := validatePrefix(prefix); err != nil {
		return "", err
	}
	if err := ValidateName(policy); err != nil {
		return "", fmt.Errorf("routes: policy: %w", err)
	}
	code, ok := algorithmCodes[algorithm]
	if !ok {
		return "", fmt.Errorf("routes: unknown algorithm %q", algorithm)
	}
	if scope == ScopeTenantRoute || scope == ScopeRoute {
		if err := ValidateName(route); err != nil {
			return "", fmt.Errorf("routes: route: %w", err)
		}
	}
	if scope == 0 || int(scope) >= len(scopeNames) {
		return "", fmt.Errorf("routes: invalid scope %v", scope)
	}
	return code, nil
}

// SubjectID is the hashed form of a subject (tenant or client address) that
// store keys carry: HashID of the subject, or "" for the empty subject.
// Compute it once per request and pass it to KeyPattern.Key for every
// policy.
type SubjectID string

// NewSubjectID returns the SubjectID of subject; "" when subject is empty,
// so that a missing identity stays detectable (see ErrEmptySubject).
func NewSubjectID(subject string) SubjectID {
	if subject == "" {
		return ""
	}
	return SubjectID(HashID(subject))
}

// KeyPattern is the store key of one policy on one route, checked and
// assembled in advance, lacking only the subject. The zero value is invalid
// (its Key fails). It is immutable and safe for concurrent use.
type KeyPattern struct {
	// head is the key up to the subject's hash for per-subject scopes, and
	// the whole key otherwise.
	head, tail string
	perSubject bool
}

// NewKeyPattern checks the arguments as Key does (all but the subject) and
// returns the pattern of their keys.
func NewKeyPattern(prefix string, scope Scope, policy, algorithm, route string) (KeyPattern, error) {
	code, err := checkKey(prefix, scope, policy, algorithm, route)
	if err != nil {
		return KeyPattern{}, err
	}
	tag := "t:"
	switch scope {
	case ScopeRoute:
		tag = "r:" + route
	case ScopeGlobal:
		tag = "g:" + policy
	}
	tail := "}:" + policy
	if scope == ScopeTenantRoute || scope == ScopeRoute {
		tail += ":" + route
	}
	tail += ":" + code
	head := prefix + ":{" + tag
	if !scope.PerSubject() {
		return KeyPattern{head: head + tail}, nil
	}
	return KeyPattern{head: head, tail: tail, perSubject: true}, nil
}

// Key returns the store key for the subject id, which only per-subject
// scopes use. It allocates the key once for per-subject scopes and not at
// all for the others. An empty id for a per-subject scope is
// ErrEmptySubject; the zero KeyPattern is an error.
func (p KeyPattern) Key(id SubjectID) (string, error) {
	switch {
	case p.head == "":
		return "", errors.New("routes: zero KeyPattern")
	case !p.perSubject:
		return p.head, nil
	case id == "":
		return "", ErrEmptySubject
	}
	return p.head + string(id) + p.tail, nil
}

// By returns the pattern of p's keys for one value of a dimension: part
// (such as "model=gpt-4o", of characters other than ':', '{' and '}')
// before the algorithm's code, so that the keys of each value differ and
// share the hash slot of p's. The caller bounds the parts it uses: every
// part is one more key per subject. A part with a forbidden character is
// an error.
func (p KeyPattern) By(part string) (KeyPattern, error) {
	if part == "" || strings.ContainsAny(part, ":{}") {
		return KeyPattern{}, fmt.Errorf("routes: dimension part %q: want 1 or more characters other than ':', '{' and '}'", part)
	}
	insert := func(s string) string {
		i := strings.LastIndexByte(s, ':')
		return s[:i] + ":" + part + s[i:]
	}
	if p.perSubject {
		p.tail = insert(p.tail)
	} else {
		p.head = insert(p.head)
	}
	return p, nil
}

// HashID returns the first 16 hex digits (64 bits) of the SHA-256 of s. It
// names a caller in keys, logs and spans without revealing it.
func HashID(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// validatePrefix checks a key prefix: 1 to 64 ASCII letters, digits, '.',
// '_', '-' or ':'.
func validatePrefix(prefix string) error {
	if prefix == "" || len(prefix) > 64 {
		return fmt.Errorf("routes: key prefix %q: want 1 to 64 bytes", prefix)
	}
	for i := 0; i < len(prefix); i++ {
		c := prefix[i]
		if c != ':' && (c == '~' || !isUnreserved(c)) {
			return fmt.Errorf("routes: key prefix %q: character %q not allowed", prefix, c)
		}
	}
	return nil
}

// Matches reports whether key is one of p's keys (of any subject).
func (p KeyPattern) Matches(key string) bool {
	if !p.perSubject {
		return p.head != "" && key == p.head
	}
	return len(key) > len(p.head)+len(p.tail) && strings.HasPrefix(key, p.head) && strings.HasSuffix(key, p.tail)
}
