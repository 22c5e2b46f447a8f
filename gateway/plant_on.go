//go:build quotagate_plant

package gateway

import (
	"sync/atomic"
	"time"
)

// A test build only (go build -tags quotagate_plant): the chaos suite's
// planted over-admission. plantAdmit turns at most one store denial a
// second into an admission, so that the suite can show its checker finds
// a gateway that admits one request a second too many. The release build
// compiles plant_off.go instead; no flag or config turns this on.

// plantLast is the Unix second of the last denial turned into an admit.
var plantLast atomic.Int64

// plantAdmit reports whether the denial decided at now is to be admitted:
// the first denial of each second is.
func plantAdmit(now time.Time) bool {
	s := now.Unix()
	last := plantLast.Load()
	return last != s && plantLast.CompareAndSwap(last, s)
}
