package identity

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// jwtVerifier checks HS256 tokens and reads the caller from their claims.
type jwtVerifier struct {
	parser      *jwt.Parser
	secret      []byte
	tenantClaim string
	tierClaim   string
	tiers       map[string]bool
	issuers     []string // empty: iss not checked
	audiences   []string // empty: aud not checked
}

func newJWTVerifier(c JWTConfig, tiers map[string]bool, now func() time.Time) (*jwtVerifier, error) {
	var errs []error
	if len(c.Secret) < 32 {
		errs = append(errs, errors.New("jwt: secret must be at least 32 bytes"))
	}
	if c.Leeway < 0 {
		errs = append(errs, errors.New("jwt: leeway must not be negative"))
	}
	errs = append(errs, nonEmpty("issuers", c.Issuers)...)
	errs = append(errs, nonEmpty("audiences", c.Audiences)...)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	v := &jwtVerifier{
		secret:      append([]byte(nil), c.Secret...),
		tenantClaim: c.TenantClaim,
		tierClaim:   c.TierClaim,
		tiers:       tiers,
		issuers:     slices.Clone(c.Issuers),
		audiences:   slices.Clone(c.Audiences),
	}
	if v.tenantClaim == "" {
		v.tenantClaim = "sub"
	}
	if v.tierClaim == "" {
		v.tierClaim = "tier"
	}
	// The parser is read-only once built and safe to share.
	v.parser = jwt.NewParser(
		jwt.WithValidMethods([]string{"HS256"}), // refuses "none", RS256, ...
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(), // an iat beyond now + leeway is refused
		jwt.WithLeeway(c.Leeway),
		jwt.WithTimeFunc(now),
		jwt.WithStrictDecoding(), // one encoding per token: no malleable signatures
	)
	return v, nil
}

// nonEmpty returns an error for each empty entry of list, named by what.
func nonEmpty(what string, list []string) []error {
	var errs []error
	for i, s := range list {
		if s == "" {
			errs = append(errs, fmt.Errorf("jwt: %s[%d] must not be empty", what, i))
		}
	}
	return errs
}

// verify checks token and returns its tenant and tier.
//
// Besides the signature (HS256 only), it requires exp in the future, and
// nbf and iat, when present, not later than now, each with the leeway;
// each of the three must be a JSON number (one of another type, a string
// of digits or null included, is refused as "invalid token": iat too,
// which went unread before iat was checked). It refuses a crit header
// parameter, whatever it lists (no extension is understood). It requires
// iss among the accepted issuers and aud holding an accepted audience,
// when those are configured; then the tenant and tier claims.
func (v *jwtVerifier) verify(token string) (tenant, tier string, err error) {
	claims := jwt.MapClaims{}
	tok, err := v.parser.ParseWithClaims(token, claims, func(*jwt.Token) (any, error) {
		return v.secret, nil
	})
	if err != nil {
		if tok != nil && !errors.Is(err, jwt.ErrTokenMalformed) {
			if alg, _ := tok.Header["alg"].(string); alg != "HS256" {
				return "", "", errTokenAlgorithm
			}
		}
		return "", "", jwtReason(err)
	}
	// RFC 7515, section 4.1.11: a recipient that does not understand an
	// extension listed in crit must reject the token, and this verifier
	// understands none. An empty or malformed crit is invalid too.
	if _, ok := tok.Header["crit"]; ok {
		return "", "", errTokenCritical
	}
	if err := v.checkIssuerAudience(claims); err != nil {
		return "", "", err
	}
	tenant, ok := claims[v.tenantClaim].(string)
	if !ok {
		return "", "", errTokenTenant
	}
	if err := checkTenant(tenant); err != nil {
		return "", "", tenantReason(err)
	}
	// The tier claim must name a configured tier, and tier names are
	// plain (lowercase letters, digits, '_', '.', '-'; package config
	// checks them): one with white space or a comma is an unknown tier.
	tier, ok = claims[v.tierClaim].(string)
	if !ok || tier == "" {
		return "", "", errTokenTier
	}
	if !v.tiers[tier] {
		return "", "", errUnknownTier
	}
	return tenant, tier, nil
}

// checkIssuerAudience checks the iss and aud claims against the accepted issuers
// and audiences, when configured. A claim of the wrong type is refused like
// a missing one.
func (v *jwtVerifier) checkIssuerAudience(claims jwt.MapClaims) error {
	if len(v.issuers) > 0 {
		iss, err := claims.GetIssuer()
		if err != nil || !slices.Contains(v.issuers, iss) {
			return errTokenIssuer
		}
	}
	if len(v.audiences) > 0 {
		aud, err := claims.GetAudience()
		if err != nil || !slices.ContainsFunc(aud, func(a string) bool { return slices.Contains(v.audiences, a) }) {
			return errTokenAudience
		}
	}
	return nil
}

// tenantReason maps why checkTenant refused a token's tenant claim to the
// reason shown to clients. White space at an end and a comma are named, as
// they are what a caller trying to pass for another tenant would send.
func tenantReason(err error) *authError {
	switch err {
	case errEdgeSpace:
		return errTokenTenantSpace
	case errComma:
		return errTokenTenantComma
	}
	return errTokenTenant
}

// jwtReason maps a parser error to the reason shown to clients; the parser's
// own message can quote token contents and is not shown.
func jwtReason(err error) *authError {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return errTokenMalformed
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return errTokenSignature
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return errTokenAlgorithm
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return errTokenNoExpiry
	case errors.Is(err, jwt.ErrTokenExpired):
		return errTokenExpired
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return errTokenNotYetValid
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return errTokenFutureIat
	}
	return errTokenInvalid
}

// looksLikeJWT reports whether s has the shape of a compact JWS: three
// non-empty base64url parts separated by dots.
func looksLikeJWT(s string) bool {
	parts, start := 0, 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			if i == start {
				return false
			}
			parts++
			start = i + 1
			continue
		}
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return parts == 3
}
