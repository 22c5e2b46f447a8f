package ratelimit

// MaxRegionUnits is the largest Rate or Burst of a cross-region item (see
// Region): the global owner computes Burst × Rate exactly in Lua numbers,
// below 2^53.
const MaxRegionUnits = 1 << 26

// Region marks an item as one quota shared by the fleets of several
// regions (see package ratelimit/regional): each region decides it on its
// own store, with the share of Limit that a global owner granted the
// region by its demand. The zero value is a quota of this region's fleet
// alone. Stores other than the regional layer ignore it.
type Region struct {
	// Leased decides the item (a TokenBucket) on this region's grant.
	Leased bool
	// SafeShare is the fraction of Limit, in [0, 1], that the region
	// decides the item on while it holds no grant: the owner unreachable
	// past the last grant's expiry, or the key not granted yet. 0 denies.
	SafeShare float64
	// Policy names the item's cross-region policy: the key class the
	// regional layer's per-policy counters are kept by (so it must be
	// bounded by the configuration, never a key or a tenant). "" counts
	// in the region's totals alone.
	Policy string
}
