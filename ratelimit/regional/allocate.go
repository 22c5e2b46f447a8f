package regional

import (
	"slices"

	"github.com/quotagate/quotagate/ratelimit"
)

// MaxUnits is the largest Rate or Burst of a key shared across regions:
// Burst × Rate stays below 2^53, exact in the owner's script.
const MaxUnits = ratelimit.MaxRegionUnits

// Capacity is a global key's limit: Rate units per the key's Per, and a
// bucket of Burst units. Both are in [1, MaxUnits].
type Capacity struct {
	Rate, Burst int64
}

// Grant is a region's share of a key's capacity: it may admit Rate units
// per Per from a bucket of Burst units until Expires (µs on the owner's
// clock). Rate or Burst 0 with Expires set means: deny. The zero value,
// None, is no grant at all (see Grant.None).
type Grant struct {
	Rate, Burst int64
	Expires     int64
}

// None reports whether g is no grant: the region decides the key on its
// safe share, as a region that cannot reach the owner does.
func (g Grant) None() bool { return g.Expires == 0 }

// live reports whether g still counts at now (µs).
func (g Grant) live(now int64) bool { return g.Expires > now }

// Claim is what the owner keeps of one region for a key: the grant it
// gave it last (Grant), the grant the region said it held when it asked
// (Held: until the answer reaches it, the region enforces that one, and if
// the answer is lost, it goes on doing so until Held expires), and the
// demand it reported (units per Per). Both grants count against the
// capacity, each until it expires (see Claim.counted).
type Claim struct {
	Region string
	Grant  Grant
	Held   Grant
	Demand int64
}

// counted returns the rate and burst of c that count at now: the larger
// of its live grants, since the region enforces one or the other.
func (c Claim) counted(now int64) (rate, burst int64) {
	for _, g := range [2]Grant{c.Grant, c.Held} {
		if g.live(now) {
			rate, burst = max(rate, g.Rate), max(burst, g.Burst)
		}
	}
	return rate, burst
}

// Ask is one region's report for a key: its demand over the last interval
// (units asked per Per, admitted or not) and the grant it holds now, with
// Held.Expires on the owner's clock.
type Ask struct {
	Region string
	Demand int64
	Held   Grant
}

// Allocate returns the grant of the region of a, reporting at now (µs on
// the owner's clock), for ttl µs, given the claims the owner keeps for the
// key (the reporter's own, if present, is ignored; so are expired ones). warm is true during
// the owner's warm-up (see the package doc): the grant is then at most
// a.Held, and None when that is nothing. Demands below 0 count as 0.
func Allocate(c Capacity, claims []Claim, a Ask, now, ttl int64, warm bool) Grant {
	var usedRate, usedBurst int64
	demands := make([]int64, 0, len(claims)+1)
	for _, cl := range claims {
		if cl.Region == a.Region || (!cl.Grant.live(now) && !cl.Held.live(now)) {
			continue
		}
		r, b := cl.counted(now)
		usedRate += r
		usedBurst += b
		demands = append(demands, clamp(cl.Demand, 0, c.Rate))
	}
	// A demand above the capacity is met no better than one of it.
	share := fairShare(c.Rate, demands, clamp(a.Demand, 0, c.Rate))
	rate := clamp(min(share, c.Rate-usedRate), 0, c.Rate)
	held := a.Held
	if !held.live(now) {
		held = Grant{}
	}
	if warm {
		rate = min(rate, held.Rate)
	}
	burst := c.Burst * rate / c.Rate
	if rate > 0 && burst == 0 {
		burst = 1
	}
	burst = clamp(min(burst, c.Burst-usedBurst), 0, c.Burst)
	if warm {
		burst = min(burst, held.Burst)
		if rate == 0 || burst == 0 {
			return Grant{}
		}
	}
	return Grant{Rate: rate, Burst: burst, Expires: now + ttl}
}

// fairShare returns the max-min fair share of capacity of the region
// asking mine, the others asking others: water-filling, then, when every
// demand is met, the rest split equally (rounded down) as headroom.
func fairShare(capacity int64, others []int64, mine int64) int64 {
	d := append(slices.Clone(others), mine)
	slices.Sort(d)
	left := capacity
	for i, x := range d {
		n := int64(len(d) - i)
		if x*n > left {
			return min(mine, left/n)
		}
		left -= x
	}
	return mine + left/int64(len(d))
}

func clamp(x, lo, hi int64) int64 { return max(lo, min(x, hi)) }
