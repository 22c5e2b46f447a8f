// Package regional shares one quota across regional fleets: each region
// decides on its own Redis, with the share of the limit that a global
// owner granted it by its demand.
//
// # The owner and its grants
//
// Owner keeps, in a global Redis, per global key the capacity (Rate per
// Per, and Burst, as configured) and one claim per region: the grant the
// region holds (a rate and a burst, with an expiry on the owner's clock)
// and the demand it last reported. One atomic script (lua/grant.lua)
// changes a key: a region reports what it was asked and admitted since
// its last report, and the grant it holds, and receives its grant for the
// next lease TTL. Allocate
// is the same computation as a pure function; the script and it are
// tested on the same cases.
//
// The algorithm is max-min fair share of the rate over the demands of
// the regions whose grants are unexpired (the reporter's new demand
// included): every region asking less than the fair level gets what it
// asks, the others the level; when all are satisfied, the rate left over
// is split equally among them as headroom. A region's new grant is its
// share, capped by what the other regions' claims leave:
//
//	grant.Rate  = min(share, Rate − Σ others' counted rates)
//	grant.Burst = min(⌊Burst × grant.Rate / Rate⌋ (at least 1), Burst − Σ others' counted bursts)
//
// A region's claim counts the larger of two grants, each until it
// expires: the one the owner gave it last, and the one it said it held
// when it asked. Until the answer to a report reaches the region (over a
// slow link, or never, if it is lost), the region goes on enforcing what
// it held; so a region's shrunk grant goes back to the others only when
// its next report says it holds the smaller one, or when the larger one
// expires. Hence the invariant, which holds after every report whatever
// the order of reports, the latency of their answers and their losses:
//
//	Σ over regions of the grant each one enforces ≤ capacity (rate and burst)
//
// A grant that is not renewed goes back at its expiry. After a shift of
// demand, the region whose demand fell shrinks at its next report and
// confirms at the one after; the region whose demand rose takes the
// difference at its first report after that: the grants follow within
// three report intervals.
//
// # Restarts of the owner
//
// A report carries the grant the region holds. For one lease TTL after
// the owner first sees a report (its epoch: a global Redis restarted
// empty starts a new one), a region is granted at most what it holds,
// and a region holding nothing is granted nothing (Grant.None: it stays
// on its safe share), because grants made before the restart are
// unknown until their holders report. Every grant of the previous epoch
// has expired when the warm-up ends. The global Redis must not evict
// (maxmemory-policy noeviction): an evicted claim is a grant forgotten.
//
// # Units
//
// Rates are units per the key's Per; all arithmetic is integer and exact
// while Rate and Burst are at most MaxUnits (the script computes in Lua
// numbers, exact below 2^53).
package regional
