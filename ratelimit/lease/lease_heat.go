package lease

import (
	"math"
	"time"
)

// The heat of the Auto keys that are not in the auto table is kept in a
// count-min sketch per shard: heatRows rows of cells, each cell the units
// asked of the keys that hash to it, decayed like E (by e^(−Δt/TTL) since
// the cell's last update, with the TTL of the key that updates it). A
// key's estimate is the least of its cells, so it counts the key's own
// demand plus what other keys left in every one of its cells: never less
// than the key's E (for one TTL), more only when all its cells collide.
// Its memory is fixed, whatever number of keys pass through it.
const (
	heatRows = 4
	// heatWidth is the cells of one row over all the shards of a store:
	// a store's sketches hold heatRows × heatWidth cells of 16 bytes
	// (1 MiB). A key that is not hot is taken for one (its estimate
	// reaches autoAdmit costs) only when all its cells collide with keys
	// asked in about the last TTL; with M keys asked once per TTL that
	// happens to about (1 − e^(−M/heatWidth))^heatRows of them: 0.2% at
	// M = heatWidth/4, 2.4% at heatWidth/2.
	heatWidth = 1 << 14
)

// heatSketch is one shard's sketch (see heatRows). The shard's lock
// guards it.
type heatSketch struct {
	cells []heatCell // heatRows rows of mask+1 cells
	mask  uint64
}

// heatCell is the decayed units of the keys hashed to it, as of at.
type heatCell struct {
	units float64
	at    int64 // Unix nanoseconds
}

// newHeatSketch returns a sketch of heatRows rows of width cells, width
// a power of two.
func newHeatSketch(width int) *heatSketch {
	return &heatSketch{cells: make([]heatCell, heatRows*width), mask: uint64(width - 1)}
}

// add folds cost units asked at now of the key whose hash is h into the
// sketch and returns the key's estimate after it (see heatRows). Each of
// the key's cells first decays by e^(−Δt/ttl) since its last update (a
// clock that went backwards decays nothing); then the cells below the
// least of them plus cost rise to it, and no other (a conservative
// update: collisions inflate the estimates less).
func (k *heatSketch) add(h uint64, now time.Time, cost int64, ttl time.Duration) float64 {
	t := now.UnixNano()
	// Two halves of the hash step through the rows (double hashing). The
	// low bits chose the shard, so they are the same for all its keys:
	// the row index starts from the high ones.
	h1, h2 := h>>32, h>>16|1
	var idx [heatRows]uint64
	est := math.Inf(1)
	for r := range uint64(heatRows) {
		i := r*(k.mask+1) + (h1+r*h2)&k.mask
		idx[r] = i
		c := &k.cells[i]
		if dt := t - c.at; dt > 0 {
			if c.units > 0 {
				c.units *= math.Exp(-float64(dt) / float64(ttl))
			}
			c.at = t
		}
		est = min(est, c.units)
	}
	est += float64(cost)
	for _, i := range idx {
		if c := &k.cells[i]; c.units < est {
			c.units = est
		}
	}
	return est
}

// heatSketchWidth is the width of each of n shards' sketches: heatWidth
// shared out, at least 64 cells.
func heatSketchWidth(n int) int { return max(heatWidth/n, 64) }
