// Package identity decides who is calling: a tenant holding an API key, a
// tenant named by a signed JWT, or an anonymous client known by its address.
//
// It knows HTTP requests and credentials, not limits or routes, and imports
// no other package of this module: the gateway passes it plain values.
package identity

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Kind is how a caller was identified.
type Kind uint8

// The kinds of caller. (The names carry the Kind prefix because APIKey is
// the configuration type of a key.)
const (
	// KindAnonymous callers presented no credential; they are known by address.
	KindAnonymous Kind = iota
	// KindAPIKey callers presented a configured API key.
	KindAPIKey
	// KindJWT callers presented a valid HS256 JSON Web Token.
	KindJWT
)

var kindNames = [...]string{KindAnonymous: "anonymous", KindAPIKey: "api_key", KindJWT: "jwt"}

// String returns "anonymous", "api_key" or "jwt".
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Caller is an authenticated (or anonymous) caller.
type Caller struct {
	Kind Kind
	// Tenant is whom limits are kept for: the tenant of the API key or JWT,
	// or for an anonymous caller "ip:" and its address, an IPv6 address
	// grouped to its prefix of Config.AnonymousIPv6Prefix bits
	// ("ip:203.0.113.7", "ip:2001:db8:1:2::/64", "ip:unknown" when the
	// address could not be read).
	Tenant string
	// Tier is the caller's tier; never empty.
	Tier string
	// Subject is whom limit state is kept for: Tenant in the namespace of
	// the credential's kind, so that callers of different kinds never share
	// a bucket by naming the same tenant. It is "key:" + Tenant for an API
	// key, "jwt:" + Tenant for a JWT, and Tenant itself ("ip:...") for an
	// anonymous caller; with Config.ShareKeyAndJWTTenants, API keys and JWTs
	// both use "tenant:" + Tenant. The prefixes differ from one another, so
	// no tenant string of one kind can produce another kind's subject
	// (a JWT whose tenant claim is "ip:127.0.0.1" has the subject
	// "jwt:ip:127.0.0.1"). Never empty.
	Subject string
	// ID is the first 16 hex characters of SHA-256(Kind.String() + ":" +
	// Tenant). It is what logs, spans and the admin API may show; the raw
	// tenant and address never are.
	ID string
	// ClientIP is the client address resolved by ClientIP; the zero Addr
	// when it could not be read.
	ClientIP netip.Addr
}

// APIKey is one configured API key. Only the key's hash is configured.
type APIKey struct {
	// SHA256Hex is the hex SHA-256 of the key (see HashKey), 64 characters.
	SHA256Hex string
	Tenant    string
	Tier      string
}

// JWTConfig configures the acceptance of HS256 JSON Web Tokens.
type JWTConfig struct {
	// Secret is the HMAC key; at least 32 bytes (RFC 7518, section 3.2).
	Secret []byte
	// TenantClaim names the string claim holding the tenant; "" means "sub".
	TenantClaim string
	// TierClaim names the string claim holding the tier; "" means "tier".
	TierClaim string
	// Leeway is the clock skew tolerated on exp, nbf and iat; 0 means
	// none (a token is expired from the second of its exp). Negative is an
	// error. The configuration's default (identity.jwt.clock_skew, 5s) is
	// applied by package config, not here.
	Leeway time.Duration
	// Issuers are the accepted values of the iss claim, compared byte for
	// byte. When it is not empty, a token without iss or with any other
	// issuer is refused; empty means iss is not checked. An empty entry is
	// an error.
	Issuers []string
	// Audiences are the accepted audiences. When it is not empty, the
	// token's aud (one string or a list of strings) must hold at least one
	// of them, byte for byte; a token without aud is refused. Empty means
	// aud is not checked. An empty entry is an error.
	Audiences []string
}

// DefaultIPv6Prefix is the IPv6 prefix length, in bits, that an anonymous
// caller is known by when Config.AnonymousIPv6Prefix is 0: a /64, the
// smallest network an end site is given.
const DefaultIPv6Prefix = 64

// MaxCredentialBytes is the longest credential accepted; longer ones are
// refused without being hashed or parsed.
const MaxCredentialBytes = 4096

// Config configures an Authenticator. It is not retained: New copies what it
// needs.
type Config struct {
	APIKeys []APIKey
	// JWT enables bearer JWTs; nil means JWTs are not accepted (a JWT-shaped
	// bearer token is then looked up as an API key, and fails as one).
	JWT *JWTConfig
	// AnonymousTier is the tier of callers without a credential; "" means
	// such a request is refused.
	AnonymousTier string
	// AnonymousIPv6Prefix is the length in bits of the IPv6 prefix that
	// one anonymous caller is known by: every address in it is one caller
	// (see Caller.Tenant). 0 means DefaultIPv6Prefix; otherwise 32 to 128.
	// IPv4 callers are always known by their address.
	AnonymousIPv6Prefix int
	// Tiers are the known tier names. A token naming any other tier is
	// refused, so that a signed but unforeseen tier cannot escape every
	// limit; API keys and AnonymousTier must name known tiers too. Required
	// when JWT is set; when nil without JWT, tiers are not checked.
	Tiers map[string]bool
	// TrustedProxies are the peers whose X-Forwarded-For is believed; see
	// ClientIP.
	TrustedProxies []netip.Prefix
	// Now is the clock for exp and nbf; nil means time.Now.
	Now func() time.Time
	// ShareKeyAndJWTTenants makes an API key's tenant and a JWT's tenant
	// claim with the same string one subject, so they share limit state
	// (see Caller.Subject). False keeps them apart. Anonymous callers never
	// share with either.
	ShareKeyAndJWTTenants bool
}

// ErrUnauthenticated is wrapped by every error of Authenticate: the request
// carries a bad, unknown or missing credential, and the gateway answers 401
// "unauthenticated". Reason extracts the short reason that may be shown to
// the client.
var ErrUnauthenticated = errors.New("unauthenticated")

// authError is an ErrUnauthenticated with a reason safe to show to clients.
type authError struct{ reason string }

func (e *authError) Error() string { return "unauthenticated: " + e.reason }
func (e *authError) Unwrap() error { return ErrUnauthenticated }

// Reason returns the short client-safe reason of an error from Authenticate
// ("unknown api key", "token expired", ...), or "" when err has none.
func Reason(err error) string {
	var ae *authError
	if errors.As(err, &ae) {
		return ae.reason
	}
	return ""
}

// The reasons given to clients. They name what is wrong with the request,
// never what is configured.
var (
	errNoCredential     = &authError{"missing credential"}
	errMalformedHeader  = &authError{"malformed authorization header"}
	errScheme           = &authError{"unsupported authorization scheme"}
	errEmptyCredential  = &authError{"empty credential"}
	errLongCredential   = &authError{"credential too long"}
	errBadCharacters    = &authError{"credential contains invalid characters"}
	errMultipleHeaders  = &authError{"multiple credential headers"}
	errConflicting      = &authError{"conflicting credentials"}
	errUnknownKey       = &authError{"unknown api key"}
	errTokenMalformed   = &authError{"malformed token"}
	errTokenAlgorithm   = &authError{"unsupported token algorithm"}
	errTokenSignature   = &authError{"invalid token signature"}
	errTokenExpired     = &authError{"token expired"}
	errTokenNotYetValid = &authError{"token not yet valid"}
	errTokenFutureIat   = &authError{"token issued in the future"}
	errTokenIssuer      = &authError{"token issuer not accepted"}
	errTokenAudience    = &authError{"token audience not accepted"}
	errTokenCritical    = &authError{"token has unsupported critical header parameters"}
	errTokenNoExpiry    = &authError{"token has no expiry"}
	errTokenInvalid     = &authError{"invalid token"}
	errTokenTenant      = &authError{"token has no valid tenant claim"}
	errTokenTenantSpace = &authError{"token tenant claim starts or ends with white space"}
	errTokenTenantComma = &authError{"token tenant claim contains a comma"}
	errTokenTier        = &authError{"token has no valid tier claim"}
	errUnknownTier      = &authError{"unknown tier"}
)

// Authenticator identifies callers. It is immutable and safe for concurrent
// use; a configuration change builds a new one.
type Authenticator struct {
	keys    map[[sha256.Size]byte]keyEntry
	jwt     *jwtVerifier
	anon    string
	v6bits  int // AnonymousIPv6Prefix, defaulted
	trusted []netip.Prefix
	// keyNS and jwtNS start the subjects of API-key and JWT callers.
	keyNS, jwtNS string
}

type keyEntry struct {
	hash                  [sha256.Size]byte
	tenant, tier, subject string
	id                    string
}

// The subject namespaces of Caller.Subject. An anonymous tenant already
// starts with anonymousNS.
const (
	keyNS       = "key:"
	jwtNS       = "jwt:"
	sharedNS    = "tenant:"
	anonymousNS = "ip:"
)

// New checks c and builds an Authenticator. It returns every problem of c
// joined in one error.
func New(c Config) (*Authenticator, error) {
	var errs []error
	known := func(what, tier string) {
		switch {
		case tier == "":
			errs = append(errs, fmt.Errorf("%s: tier must not be empty", what))
		case c.Tiers != nil && !c.Tiers[tier]:
			errs = append(errs, fmt.Errorf("%s: unknown tier %q", what, tier))
		}
	}
	a := &Authenticator{
		keys:    make(map[[sha256.Size]byte]keyEntry, len(c.APIKeys)),
		anon:    c.AnonymousTier,
		v6bits:  c.AnonymousIPv6Prefix,
		trusted: append([]netip.Prefix(nil), c.TrustedProxies...),
		keyNS:   keyNS,
		jwtNS:   jwtNS,
	}
	if c.ShareKeyAndJWTTenants {
		a.keyNS, a.jwtNS = sharedNS, sharedNS
	}
	for i, k := range c.APIKeys {
		what := fmt.Sprintf("api_keys[%d]", i)
		var h [sha256.Size]byte
		if len(k.SHA256Hex) != 2*sha256.Size {
			errs = append(errs, fmt.Errorf("%s: key_sha256 must be 64 hex characters", what))
			continue
		}
		if _, err := hex.Decode(h[:], []byte(k.SHA256Hex)); err != nil {
			errs = append(errs, fmt.Errorf("%s: key_sha256 must be 64 hex characters", what))
			continue
		}
		if err := checkTenant(k.Tenant); err != nil {
			errs = append(errs, fmt.Errorf("%s: tenant %w", what, err))
		}
		known(what, k.Tier)
		if _, dup := a.keys[h]; dup {
			errs = append(errs, fmt.Errorf("%s: duplicate key_sha256", what))
		}
		a.keys[h] = keyEntry{hash: h, tenant: k.Tenant, tier: k.Tier, subject: a.keyNS + k.Tenant, id: callerID(KindAPIKey, k.Tenant)}
	}
	if c.AnonymousTier != "" {
		known("anonymous", c.AnonymousTier)
	}
	switch {
	case a.v6bits == 0:
		a.v6bits = DefaultIPv6Prefix
	case a.v6bits < 32 || a.v6bits > 128:
		errs = append(errs, fmt.Errorf("anonymous: ipv6 prefix must be 32 to 128 bits, got %d", a.v6bits))
	}
	for i, p := range c.TrustedProxies {
		if !p.IsValid() {
			errs = append(errs, fmt.Errorf("trusted_proxies[%d]: invalid prefix", i))
		}
	}
	if c.JWT != nil {
		if c.Tiers == nil {
			errs = append(errs, errors.New("jwt: the known tiers must be given"))
		}
		v, err := newJWTVerifier(*c.JWT, c.Tiers, c.Now)
		if err != nil {
			errs = append(errs, err)
		}
		a.jwt = v
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	return a, nil
}

// Authenticate identifies the caller of r.
//
// The credential is taken from "Authorization: Bearer <credential>" or
// "X-API-Key: <credential>"; both may be sent only with the same value. A
// bearer token shaped like a JWT (three base64url parts) is verified as a JWT
// when JWTs are configured; any other credential must be a configured API
// key. A request with no credential is anonymous, or refused when no
// anonymous tier is configured. A credential that is present but bad is
// always refused, never downgraded to anonymous: unknown key, empty value,
// another scheme than Bearer, repeated headers, more than MaxCredentialBytes,
// or characters outside printable ASCII.
//
// Every error wraps ErrUnauthenticated; see Reason.
func (a *Authenticator) Authenticate(r *http.Request) (Caller, error) {
	ip := ClientIP(r, a.trusted)
	cred, bearer, err := credential(r.Header)
	if err != nil {
		return Caller{}, err
	}
	if cred == "" {
		if a.anon == "" {
			return Caller{}, errNoCredential
		}
		tenant := anonymousTenant(ip, a.v6bits)
		return Caller{Kind: KindAnonymous, Tenant: tenant, Tier: a.anon, Subject: tenant, ID: callerID(KindAnonymous, tenant), ClientIP: ip}, nil
	}
	if bearer && a.jwt != nil && looksLikeJWT(cred) {
		tenant, tier, err := a.jwt.verify(cred)
		if err != nil {
			return Caller{}, err
		}
		return Caller{Kind: KindJWT, Tenant: tenant, Tier: tier, Subject: a.jwtNS + tenant, ID: callerID(KindJWT, tenant), ClientIP: ip}, nil
	}
	k, ok := a.lookupKey(cred)
	if !ok {
		return Caller{}, errUnknownKey
	}
	return Caller{Kind: KindAPIKey, Tenant: k.tenant, Tier: k.tier, Subject: k.subject, ID: k.id, ClientIP: ip}, nil
}

// KeySubjects returns the Caller.Subject of every configured API key's
// caller, each once, in no particular order: the subjects a caller with a
// key can have, known before any request (JWT and anonymous subjects are
// not, as they come from the request). The slice is new on each call.
func (a *Authenticator) KeySubjects() []string {
	seen := make(map[string]bool, len(a.keys))
	out := make([]string, 0, len(a.keys))
	for _, k := range a.keys {
		if !seen[k.subject] {
			seen[k.subject] = true
			out = append(out, k.subject)
		}
	}
	return out
}

// lookupKey finds the configured API key whose hash is SHA-256(key).
//
// The key is hashed first and the hash is looked up in a map, so the work
// does not grow with the number of keys and no comparison ever runs over the
// presented key itself. The map lookup's timing depends only on the hash of
// what the client sent: learning that a guess's hash shares a prefix with a
// stored hash tells nothing about a key with that hash (that would take a
// SHA-256 preimage). The constant-time comparison of the whole hash after the
// lookup keeps the final check free of early exits as well.
func (a *Authenticator) lookupKey(key string) (keyEntry, bool) {
	h := sha256.Sum256([]byte(key))
	k, ok := a.keys[h]
	if !ok || subtle.ConstantTimeCompare(h[:], k.hash[:]) != 1 {
		return keyEntry{}, false
	}
	return k, true
}

// credential extracts the presented credential from h, and whether it came
// as a bearer token. It returns "" and no error when none is presented.
func credential(h http.Header) (cred string, bearer bool, err error) {
	// The names are looked up as stored: net/http canonicalises header names
	// as it reads them ("authorization" and "X-API-KEY" arrive as
	// "Authorization" and "X-Api-Key"), so indexing the map under the
	// canonical spelling finds what Header.Values would, without
	// canonicalising the constant name again on every request.
	auths, keys := h["Authorization"], h["X-Api-Key"]
	if len(auths) > 1 || len(keys) > 1 {
		return "", false, errMultipleHeaders
	}
	var fromAuth, fromKey string
	if len(auths) == 1 {
		if fromAuth, err = bearerToken(auths[0]); err != nil {
			return "", false, err
		}
	}
	if len(keys) == 1 {
		if fromKey, err = checkCredential(strings.Trim(keys[0], " \t")); err != nil {
			return "", false, err
		}
	}
	switch {
	case len(auths) == 1 && len(keys) == 1:
		if subtle.ConstantTimeCompare([]byte(fromAuth), []byte(fromKey)) != 1 {
			return "", false, errConflicting
		}
		return fromAuth, true, nil
	case len(auths) == 1:
		return fromAuth, true, nil
	case len(keys) == 1:
		return fromKey, false, nil
	}
	return "", false, nil
}

// bearerToken returns the token of an Authorization header value, which must
// use the Bearer scheme (case-insensitive, RFC 9110 section 11.1).
func bearerToken(v string) (string, error) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return "", errMalformedHeader
	}
	scheme, token, found := strings.Cut(v, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		if strings.ContainsAny(scheme, "\t") || !isToken(scheme) {
			return "", errMalformedHeader
		}
		return "", errScheme
	}
	if !found {
		return "", errEmptyCredential
	}
	return checkCredential(strings.TrimLeft(token, " "))
}

// checkCredential refuses empty, oversized or non-printable credentials.
func checkCredential(c string) (string, error) {
	if c == "" {
		return "", errEmptyCredential
	}
	if len(c) > MaxCredentialBytes {
		return "", errLongCredential
	}
	for i := 0; i < len(c); i++ {
		if c[i] <= ' ' || c[i] >= 0x7f {
			return "", errBadCharacters
		}
	}
	return c, nil
}

// isToken reports whether s is a non-empty RFC 9110 token (a scheme name).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// Why checkTenant refuses a tenant. errEdgeSpace and errComma are told
// apart from the others because a JWT refused for them says so (see
// tenantReason).
var (
	errTenantEmpty   = errors.New("must not be empty")
	errTenantLong    = errors.New("must be at most 256 bytes")
	errTenantControl = errors.New("must not contain control characters")
	errEdgeSpace     = errors.New("must not start or end with white space")
	errComma         = errors.New("must not contain a comma")
)

// checkTenant refuses tenants that are empty, longer than 256 bytes, or
// contain control characters; that start or end with white space (any
// rune unicode.IsSpace reports, tab and no-break space included, and
// U+FEFF, which JavaScript's trim removes); or that contain a comma.
//
// The tenant reaches the upstream as the value of X-Quotagate-Tenant. HTTP
// parsers trim the spaces and tabs around a header value (and many
// frameworks trim every Unicode space), and a comma splits a header into a
// list, so " victim", "victim " and "victim,x" would each keep quotas of
// their own while the upstream read "victim". The package config applies
// the same rule to the API keys' tenants.
func checkTenant(t string) error {
	if t == "" {
		return errTenantEmpty
	}
	if len(t) > 256 {
		return errTenantLong
	}
	for i := 0; i < len(t); i++ {
		if t[i] < ' ' || t[i] == 0x7f {
			return errTenantControl
		}
	}
	first, _ := utf8.DecodeRuneInString(t)
	last, _ := utf8.DecodeLastRuneInString(t)
	if isEdgeSpace(first) || isEdgeSpace(last) {
		return errEdgeSpace
	}
	if strings.IndexByte(t, ',') >= 0 {
		return errComma
	}
	return nil
}

// isEdgeSpace reports whether r is white space that a reader of a header
// value may trim: unicode.IsSpace, or U+FEFF (zero-width no-break space).
func isEdgeSpace(r rune) bool {
	return unicode.IsSpace(r) || r == '\uFEFF'
}

// callerID returns the loggable id of a caller; see Caller.ID.
func callerID(k Kind, tenant string) string {
	h := sha256.Sum256([]byte(k.String() + ":" + tenant))
	return hex.EncodeToString(h[:8])
}

// HashKey returns the hex SHA-256 of an API key, the form in which keys are
// configured (APIKey.SHA256Hex).
func HashKey(plaintext string) string {
	h := sha256.Sum256([]byte(plaintext))
	return hex.EncodeToString(h[:])
}
