package identity

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// ErrUnknownTenant is returned by Named for a tenant that no credential of
// the kind asked for can name: no API key has it, or (for an anonymous
// caller) it is not an IP address.
var ErrUnknownTenant = errors.New("identity: unknown tenant")

// Named returns the Caller that Authenticate identifies for a credential of
// kind naming tenant, without the credential: it is for an operator who
// looks a tenant up (the admin console), and checks nothing a credential
// would prove. The Caller's Subject and ID are those of every request of
// that tenant, so its store keys are the ones its requests use.
//
//   - KindAPIKey: tenant must be the tenant of a configured key
//     (ErrUnknownTenant otherwise). tier "" is the tier of its keys, which
//     must then all have the same; otherwise one of its keys' tiers.
//   - KindJWT: JWTs must be configured; tenant must be one a token could
//     carry (as Authenticate checks it) and tier a known tier, which must be
//     given: a token names its own.
//   - KindAnonymous: tenant is a client address, with or without the "ip:"
//     of Caller.Tenant, and for IPv6 with or without its prefix length
//     ("ip:2001:db8::/64"); it is grouped as Authenticate groups it
//     (ErrUnknownTenant when it is not an address). Anonymous callers must
//     be accepted, and tier is "" or the anonymous tier.
//
// ClientIP is the zero Addr but for an anonymous caller. The errors other
// than ErrUnknownTenant say what is wrong in words an operator can act on.
func (a *Authenticator) Named(kind Kind, tenant, tier string) (Caller, error) {
	switch kind {
	case KindAPIKey:
		var tiers []string
		var k keyEntry
		for _, e := range a.keys {
			if e.tenant == tenant {
				k = e
				if !slices.Contains(tiers, e.tier) {
					tiers = append(tiers, e.tier)
				}
			}
		}
		slices.Sort(tiers)
		switch {
		case len(tiers) == 0:
			return Caller{}, fmt.Errorf("%w: no API key has the tenant %q", ErrUnknownTenant, tenant)
		case tier == "" && len(tiers) > 1:
			return Caller{}, fmt.Errorf("the keys of tenant %q have the tiers %s: name one", tenant, strings.Join(tiers, ", "))
		case tier == "":
			tier = tiers[0]
		case !slices.Contains(tiers, tier):
			return Caller{}, fmt.Errorf("no API key of tenant %q has the tier %q (its keys have %s)", tenant, tier, strings.Join(tiers, ", "))
		}
		return Caller{Kind: KindAPIKey, Tenant: k.tenant, Tier: tier, Subject: k.subject, ID: k.id}, nil
	case KindJWT:
		if a.jwt == nil {
			return Caller{}, errors.New("JWTs are not accepted (identity.jwt is not configured)")
		}
		if err := checkTenant(tenant); err != nil {
			return Caller{}, fmt.Errorf("a JWT's tenant %w", err)
		}
		switch {
		case tier == "":
			return Caller{}, errors.New("a JWT names its tier: give the tier")
		case !a.jwt.tiers[tier]:
			return Caller{}, fmt.Errorf("unknown tier %q", tier)
		}
		return Caller{Kind: KindJWT, Tenant: tenant, Tier: tier, Subject: a.jwtNS + tenant, ID: callerID(KindJWT, tenant)}, nil
	case KindAnonymous:
		s := strings.TrimPrefix(tenant, anonymousNS)
		addr, err := netip.ParseAddr(s)
		if err != nil {
			p, perr := netip.ParsePrefix(s)
			if perr != nil {
				return Caller{}, fmt.Errorf("%w: %q is not an IP address", ErrUnknownTenant, tenant)
			}
			addr = p.Addr()
		}
		addr = addr.Unmap().WithZone("")
		if a.anon == "" {
			return Caller{}, errors.New("anonymous callers are refused (identity.anonymous is not configured)")
		}
		if tier != "" && tier != a.anon {
			return Caller{}, fmt.Errorf("anonymous callers have the tier %q, not %q", a.anon, tier)
		}
		t := anonymousTenant(addr, a.v6bits)
		return Caller{Kind: KindAnonymous, Tenant: t, Tier: a.anon, Subject: t, ID: callerID(KindAnonymous, t), ClientIP: addr}, nil
	}
	return Caller{}, fmt.Errorf("identity: no caller of kind %s can be named", kind)
}
