package gateway

import (
	"github.com/quotagate/quotagate/ratelimit/stack"
)

// shareView is the quota and window RateLimit-Policy advertises for bp
// decided on its local share: the share of the fleet's size now, which the
// store's Fallback enforced (store.fleet_size is only its floor).
func (g *Gateway) shareView(bp *boundPolicy) (quota, window int64) {
	n := g.live.Load().store.FleetSize()
	if n == bp.shareFleet {
		return bp.shareQuota, bp.shareWindow
	}
	return advertised(stack.LocalShare(bp.limit, bp.algorithm, n, bp.shareCost), bp.algorithm)
}
