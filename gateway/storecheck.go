package gateway

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/ratelimit/stack"
)

// storeCheckTimeout bounds the PING of checkStore.
const storeCheckTimeout = time.Second

// checkStore pings the store (see stack.Stack.Ping) and, if it does
// not answer, logs one ERROR line with the cause and what cfg's policies
// do until it answers: fail open (admit), closed (503) or local (this
// instance's share of the limit). It runs at start and after every
// reload; it changes nothing, since the gateway serves either way.
func (g *Gateway) checkStore(cfg *config.Config, store *stack.Stack) {
	ctx, cancel := context.WithTimeout(context.Background(), storeCheckTimeout)
	defer cancel()
	err := store.Ping(ctx)
	if err == nil {
		return
	}
	modes := map[string][]string{}
	for name, p := range cfg.Policies {
		modes[p.OnStoreError.String()] = append(modes[p.OnStoreError.String()], name)
	}
	attrs := []any{slog.String("error", err.Error()), slog.String("store", string(cfg.Store.Kind)),
		slog.Any("addrs", cfg.Store.Redis.Addrs)}
	for _, mode := range []string{"open", "closed", "local"} {
		names := modes[mode]
		slices.Sort(names)
		if names == nil {
			names = []string{}
		}
		attrs = append(attrs, slog.Any("fail_"+mode, names))
	}
	g.opts.Logger.Error("store unreachable: decisions follow each policy's on_store_error until it answers", attrs...)
}
