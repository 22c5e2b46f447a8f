package gateway

import (
	"time"

	"github.com/quotagate/quotagate/ratelimit"
)

// calendarWindow is the RateLimit-Policy w of a calendar window: the whole
// seconds (rounded up, at least 1) until the window the decision was made
// in ends, as the store reported it, or by the gateway's clock when the
// store reported nothing to wait for (a key with nothing counted).
func calendarWindow(cal ratelimit.Calendar, res ratelimit.Result, now time.Time) int64 {
	switch {
	case !res.Allowed && res.RetryAfter > 0:
		return ceilSeconds(res.RetryAfter)
	case res.ResetAfter > 0:
		return ceilSeconds(res.ResetAfter)
	}
	return ceilSeconds(cal.Until(now))
}
