//go:build !quotagate_plant

package gateway

import "time"

// plantAdmit is the release build's: it never admits a denial (see
// plant_on.go, built only with the quotagate_plant tag for the chaos
// suite's planted over-admission). The compiler removes the call.
func plantAdmit(time.Time) bool { return false }
