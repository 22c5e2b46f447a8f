package regional

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

// View is what this instance knows of one cross-region key now, for
// reads such as the quota endpoint.
type View struct {
	Region string
	// Grant is the region's live grant of the key as this instance last
	// read it (Expires µs on this instance's clock); None when it holds
	// none.
	Grant Grant
	// Safe reports that the key is decided on its safe share now: no
	// live grant, or this instance's read of the grants is stale (see
	// Layer.share).
	Safe bool
	// Rate and Burst are the limit a decision of the key uses now, per
	// the item's Per: the region's bucket is decided, and so is read, on
	// them. Either 0 denies.
	Rate, Burst int64
	// Now is this instance's clock (µs) when the view was taken.
	Now int64
}

// View returns the view of it, a cross-region item (it.Region.Leased),
// as Decide would decide it now. It makes no call.
func (l *Layer) View(it ratelimit.Item) View {
	now := l.o.Now().UnixMicro()
	l.mu.Lock()
	defer l.mu.Unlock()
	v := View{Region: l.o.Region, Now: now}
	v.Rate, v.Burst = l.share(&it, now)
	if g := l.grants[it.Key]; g.live(now) {
		v.Grant = g
	}
	v.Safe = !l.fresh(now) || v.Grant.None()
	return v
}

// GlobalView is what the global owner holds of one key.
type GlobalView struct {
	// Capacity is the key's limit as the last report gave it; zero when
	// no region has reported the key (or its state expired).
	Capacity Capacity
	// Claims are the regions' claims, sorted by region, expired ones
	// included (Claim.Grant.Expires µs on the owner's clock, 0 for a
	// warm-up's refusal).
	Claims []Claim
	// Now is the owner's clock (µs, the global Redis's TIME) when it was
	// read, the clock the claims' expiries are on.
	Now int64
}

// Global reads the owner's state of key from the global Redis, bounded by
// the layer's Timeout. It is a read: it changes nothing and has no part
// in any decision. A failure wraps ratelimit.ErrUnavailable.
func (l *Layer) Global(ctx context.Context, key string) (GlobalView, error) {
	ctx, cancel := context.WithTimeout(ctx, l.o.Timeout)
	defer cancel()
	return l.o.Owner.View(ctx, key)
}

// View reads the owner's state of key: its capacity and every region's
// claim, with the owner's clock, in one round trip.
func (o *Owner) View(ctx context.Context, key string) (GlobalView, error) {
	pipe := o.client.Pipeline()
	t := pipe.Time(ctx)
	all := pipe.HGetAll(ctx, o.prefix+"k:"+key)
	if _, err := pipe.Exec(ctx); err != nil {
		return GlobalView{}, ratelimit.Unavailable("regions: read the owner", err)
	}
	v := GlobalView{Now: t.Val().UnixMicro()}
	m := all.Val()
	if len(m) == 0 {
		return v, nil
	}
	claims, err := parseClaims(m)
	if err != nil {
		return GlobalView{}, err
	}
	v.Claims = claims
	r, rerr := strconv.ParseInt(m["rate"], 10, 64)
	b, berr := strconv.ParseInt(m["burst"], 10, 64)
	if rerr != nil || berr != nil || r < 1 || b < 1 {
		return GlobalView{}, fmt.Errorf("%w: capacity %q %q", ErrMalformed, m["rate"], m["burst"])
	}
	v.Capacity = Capacity{Rate: r, Burst: b}
	return v, nil
}

// parseClaims returns the claims of a key's hash in the global Redis (the
// fields "r:" + region, see lua/grant.lua), sorted by region.
func parseClaims(m map[string]string) ([]Claim, error) {
	var out []Claim
	for f, v := range m {
		region, ok := strings.CutPrefix(f, "r:")
		if !ok {
			continue
		}
		n, ok := parseInts(v, 8)
		if !ok {
			return nil, fmt.Errorf("%w: claim %q", ErrMalformed, v)
		}
		out = append(out, Claim{Region: region, Grant: Grant{Rate: n[0], Burst: n[1], Expires: n[2]}, Demand: n[3],
			Held: Grant{Rate: n[5], Burst: n[6], Expires: n[7]}})
	}
	slices.SortFunc(out, func(a, b Claim) int { return strings.Compare(a.Region, b.Region) })
	return out, nil
}

// KeyStat is one cross-region key as this instance knows it, for the
// admin console.
type KeyStat struct {
	Key string
	// Limit is the key's configured limit, as last decided here or
	// reported (the capacity shared by the regions).
	Limit ratelimit.Limit
	// Grant is the region's live grant (None: it holds none).
	Grant Grant
	// Reported reports that Demand, Admitted and Granted are set: this
	// instance is the region's reporter and reported the key at its last
	// report. Demand is what the region was asked, Admitted what it
	// admitted, Granted what the owner granted it, in units per
	// Limit.Per over the last interval.
	Reported                  bool
	Demand, Admitted, Granted int64
}

// KeyStats returns the keys this instance holds a live grant of, has
// decided since its last read of the grants, or (on the reporter)
// reported last, in key order.
func (l *Layer) KeyStats() []KeyStat {
	now := l.o.Now().UnixMicro()
	leader := l.leader.load()
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]KeyStat, 0, len(l.seen))
	for k, seen := range l.seen {
		s := KeyStat{Key: k, Limit: seen.limit}
		if g := l.grants[k]; g.live(now) {
			s.Grant = g
		}
		if r, ok := l.reports[k]; ok && leader {
			s.Reported, s.Demand, s.Admitted, s.Granted = true, r.demand, r.admitted, r.granted
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b KeyStat) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// LeaseTTL returns the layer's lease TTL: past it without word from the
// owner (Stats.SinceReport), the region is on its safe shares.
func (l *Layer) LeaseTTL() time.Duration { return l.o.LeaseTTL }
