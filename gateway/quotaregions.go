package gateway

import (
	"context"

	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/regional"
)

// regionViewer is the regional layer of a store with store.global
// (package ratelimit/regional): what the quota endpoint asks of a policy
// shared across regions.
type regionViewer interface {
	View(ratelimit.Item) regional.View
	Global(ctx context.Context, key string) (regional.GlobalView, error)
}

// quotaRegions is the "regions" object of a quota entry: the regional
// view (this region's grant of the key, as this instance last read it)
// and the global one (what the global owner holds of it). Its field names
// are part of the users' contract (docs/reference/http-api.md).
type quotaRegions struct {
	Region string `json:"region"`
	// Grant is the region's live grant; null when it holds none.
	Grant *quotaGrant `json:"grant"`
	// SafeShare reports that the key is decided on the policy's
	// safe_share now (no live grant, or this instance's read of the
	// grants is stale).
	SafeShare bool        `json:"safe_share"`
	Global    quotaGlobal `json:"global"`
}

// quotaGrant is a grant: rate units per the policy's per (window_s), a
// bucket of burst, for expires_ms more milliseconds (0: expired).
type quotaGrant struct {
	Rate      int64 `json:"rate"`
	Burst     int64 `json:"burst"`
	ExpiresMS int64 `json:"expires_ms"`
}

// quotaGlobal is the global owner's state of a key: its capacity and the
// claim of every region that reported it (sorted by region). Available is
// false when it was not read (Reason: "budget", the read budget is spent;
// "unreachable", the global Redis did not answer); the other fields are
// then empty.
type quotaGlobal struct {
	Available bool          `json:"available"`
	Reason    string        `json:"reason,omitempty"`
	Rate      int64         `json:"rate"`
	Burst     int64         `json:"burst"`
	Regions   []quotaRegion `json:"regions"`
}

// quotaRegion is one region's claim at the global owner: the grant it was
// given last and the demand it reported last (units per the policy's
// per).
type quotaRegion struct {
	Region string `json:"region"`
	quotaGrant
	Demand int64 `json:"demand"`
}

// Reasons a global view is unavailable.
const (
	globalBudget      = "budget"
	globalUnreachable = "unreachable"
)

// regionRead is what readQuota learned of the cross-region entries of a
// read: the viewer, the index of each read item among the entries, and the
// cross-region entries with the keys to read at the owner.
type regionRead struct {
	viewer regionViewer
	read   []int // read item j is entry read[j]; nil: item j is entry j
	leased []int // entries of cross-region policies
	keys   []string
}

// index returns the entry of read item j.
func (r *regionRead) index(j int) int {
	if r.read == nil {
		return j
	}
	return r.read[j]
}

// regionViews fills the regional view of each cross-region entry of out
// and returns the items to read: a cross-region one on the limit it is
// decided on now (its grant, or its safe share), one that is denied now
// (a grant or safe share of 0) not at all, its entry left at 0. Without
// a regional layer, or without cross-region entries, items are returned
// as they are.
func (p *pipeline) regionViews(items []ratelimit.Item, binds []*boundPolicy, out []quotaPolicy) ([]ratelimit.Item, *regionRead) {
	r := &regionRead{}
	viewer, _ := p.store.Wrapped().(regionViewer)
	if viewer == nil {
		return items, r
	}
	r.viewer = viewer
	read := make([]ratelimit.Item, 0, len(items))
	for i, it := range items {
		reg := binds[i].region
		if !reg.Leased || it.Algorithm != ratelimit.TokenBucket {
			read = append(read, it)
			r.read = append(r.read, i)
			continue
		}
		it.Region = reg
		v := viewer.View(it)
		qr := &quotaRegions{Region: v.Region, SafeShare: v.Safe, Global: quotaGlobal{Regions: []quotaRegion{}}}
		if !v.Grant.None() {
			qr.Grant = &quotaGrant{Rate: v.Grant.Rate, Burst: v.Grant.Burst, ExpiresMS: expiresMS(v.Grant.Expires, v.Now)}
		}
		out[i].Regions = qr
		r.leased = append(r.leased, i)
		r.keys = append(r.keys, it.Key)
		if v.Rate <= 0 || v.Burst <= 0 {
			continue
		}
		it.Limit.Rate, it.Limit.Burst = v.Rate, v.Burst
		read = append(read, it)
		r.read = append(r.read, i)
	}
	return read, r
}

// readGlobal fills the global view of each cross-region entry of out,
// read from the global owner. Each key is one call to the global Redis,
// which spends one read of the gateway-wide budget (server.quota_reads):
// a spent budget leaves the view unavailable (reason "budget"). A failed
// call (bounded by store.global.redis.timeout) leaves it unavailable
// (reason "unreachable"), and those after it too, without a call. None of
// this goes near the decisions' store or its breaker: the global Redis is
// a connection of its own, and a read of it decides nothing.
func (g *Gateway) readGlobal(ctx context.Context, p *pipeline, r *regionRead, out []quotaPolicy) {
	unreachable := false
	for n, i := range r.leased {
		gl := &out[i].Regions.Global
		if unreachable {
			gl.Reason = globalUnreachable
			continue
		}
		if ok, _, _ := p.readBudget.set.Allow(quotaBudgetKey, g.opts.Now(), 1); !ok {
			gl.Reason = globalBudget
			continue
		}
		v, err := r.viewer.Global(ctx, r.keys[n])
		if err != nil {
			gl.Reason, unreachable = globalUnreachable, true
			continue
		}
		gl.Available, gl.Rate, gl.Burst = true, v.Capacity.Rate, v.Capacity.Burst
		for _, c := range v.Claims {
			gl.Regions = append(gl.Regions, quotaRegion{Region: c.Region, Demand: c.Demand,
				quotaGrant: quotaGrant{Rate: c.Grant.Rate, Burst: c.Grant.Burst, ExpiresMS: expiresMS(c.Grant.Expires, v.Now)}})
		}
	}
}

// expiresMS returns the milliseconds from now to expires (both µs),
// rounded up; 0 when it has passed.
func expiresMS(expires, now int64) int64 {
	if expires <= now {
		return 0
	}
	return (expires - now + 999) / 1000
}
