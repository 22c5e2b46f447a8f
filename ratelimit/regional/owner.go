package regional

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/ratelimit"
)

//go:embed lua/grant.lua
var grantBody string

// The script runs as a Redis function (Redis 7 and later), in a library
// named for the SHA-1 of its source, as package redisstore's decision
// script is: owners of different versions sharing a global Redis each call
// their own. It writes, so it runs on the primary.
var libraryName, librarySource = func() (string, string) {
	text := func(name string) string {
		return "#!lua name=" + name + "\n" + grantBody +
			"redis.register_function{function_name = '" + name + "', callback = report}\n"
	}
	sum := sha1.Sum([]byte(text("quotagate_regions")))
	name := "quotagate_regions_" + hex.EncodeToString(sum[:])[:12]
	return name, text(name)
}()

// Owner is the client side of the global owner of cross-region keys: it
// sends a region's reports to the global Redis and returns the grants. It
// is safe for concurrent use.
type Owner struct {
	client redis.UniversalClient
	prefix string
	now    func() time.Time
}

// OwnerOptions configure an Owner.
type OwnerOptions struct {
	// Prefix starts every key the owner writes; "" means "qg". All of
	// them share the hash tag "{regions}", so that on a Cluster one
	// primary holds them (the script reads the epoch with the key).
	Prefix string
	// Now is the region's clock, which a grant's expiry is on; nil =
	// time.Now.
	Now func() time.Time
}

// NewOwner returns an Owner on client, a connection to the global Redis
// (Redis 7 or later: the script is a function). The Owner does not own
// client: closing it is the caller's.
func NewOwner(client redis.UniversalClient, o OwnerOptions) *Owner {
	if o.Prefix == "" {
		o.Prefix = "qg"
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Owner{client: client, prefix: o.Prefix + ":{regions}:", now: o.Now}
}

// KeyReport is one region's report for one key.
type KeyReport struct {
	// Key is the key as the gateway names it (the regional bucket's key).
	Key string
	// Limit is the key's configured token-bucket limit: the capacity
	// shared by every region (Rate and Burst at most MaxUnits).
	Limit ratelimit.Limit
	// Demand is the units the region was asked per Limit.Per over the
	// last interval, admitted or not; Admitted the units it admitted in
	// it (reported, not used by the algorithm).
	Demand, Admitted int64
	// Held is the grant the region holds now (Expires on the region's
	// clock; None: nothing). It rebuilds the owner's claims after a
	// restart (see the package doc).
	Held Grant
}

// Granted is the owner's answer to one KeyReport.
type Granted struct {
	// Grant is the region's new grant, its Expires on the region's clock
	// (OwnerOptions.Now, µs): the time the report was sent plus the TTL
	// the owner granted. The owner's own expiry of the claim is later in
	// real time (the report reached it after it was sent), so the region
	// stops using a grant before the owner gives it to another region.
	Grant Grant
	// Warm reports that the owner is in its warm-up (see the package doc).
	Warm bool
}

// ErrMalformed is a reply of the global Redis that is not a grant. It
// wraps ratelimit.ErrUnavailable.
var ErrMalformed = fmt.Errorf("%w: regions: malformed owner reply", ratelimit.ErrUnavailable)

// Report sends the reports of region for one lease ttl in one pipeline
// and returns one Granted per report, in order. A failure (the owner
// unreachable, timed out, or its reply malformed) wraps
// ratelimit.ErrUnavailable and returns no grant: the region keeps those
// it holds until they expire.
func (o *Owner) Report(ctx context.Context, region string, ttl time.Duration, reports []KeyReport) ([]Granted, error) {
	if len(reports) == 0 {
		return nil, nil
	}
	out, err := o.run(ctx, region, ttl, reports)
	if err != nil && isNoFunction(err) {
		if lerr := o.client.FunctionLoadReplace(ctx, librarySource).Err(); lerr != nil {
			return nil, ratelimit.Unavailable("regions: load owner script", lerr)
		}
		out, err = o.run(ctx, region, ttl, reports)
	}
	if err != nil {
		return nil, ratelimit.Unavailable("regions: report", err)
	}
	return out, nil
}

func (o *Owner) run(ctx context.Context, region string, ttl time.Duration, reports []KeyReport) ([]Granted, error) {
	epoch := o.prefix + "epoch"
	sent := o.now().UnixMicro()
	pipe := o.client.Pipeline()
	cmds := make([]*redis.Cmd, len(reports))
	for i, r := range reports {
		left := max(r.Held.Expires-sent, 0)
		cmds[i] = pipe.FCall(ctx, libraryName, []string{epoch, o.prefix + "k:" + r.Key},
			region, r.Limit.Rate, r.Limit.Burst, r.Limit.Per.Microseconds(), ttl.Microseconds(),
			r.Demand, r.Admitted, r.Held.Rate, r.Held.Burst, left)
	}
	_, _ = pipe.Exec(ctx)
	out := make([]Granted, len(reports))
	for i, c := range cmds {
		v, err := c.Int64Slice()
		if err != nil {
			return nil, err
		}
		if len(v) != 4 || v[0] < 0 || v[1] < 0 || v[2] < 0 {
			return nil, fmt.Errorf("%w: %v", ErrMalformed, v)
		}
		g := Granted{Warm: v[3] == 1}
		if v[2] > 0 {
			g.Grant = Grant{Rate: v[0], Burst: v[1], Expires: sent + v[2]}
		}
		out[i] = g
	}
	return out, nil
}

// isNoFunction reports whether err says the library is not loaded (a new
// or restarted server, or one flushed of functions).
func isNoFunction(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.Contains(re.Error(), "Function not found")
}

// Claims returns the owner's claims of key, for views and tests; expired
// claims included, sorted by region.
func (o *Owner) Claims(ctx context.Context, key string) ([]Claim, error) {
	m, err := o.client.HGetAll(ctx, o.prefix+"k:"+key).Result()
	if err != nil {
		return nil, ratelimit.Unavailable("regions: claims", err)
	}
	return parseClaims(m)
}
