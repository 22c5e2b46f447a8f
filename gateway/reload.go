package gateway

import (
	"context"
	"log/slog"
	"time"

	"github.com/quotagate/quotagate/config"
)

// ReloadFile loads, validates and applies the configuration at path. A file
// that does not load or validate is logged with every problem, counted as a
// failed reload, and leaves the live configuration in force.
func (g *Gateway) ReloadFile(path string) error {
	cfg, err := config.Load(path, g.opts.Getenv)
	if err != nil {
		g.RejectReload()
		g.opts.Logger.Error("config reload rejected; keeping the live configuration", slog.String("path", path), slog.String("error", err.Error()))
		return err
	}
	old := g.Config().Server
	if cfg.Server.Listen != old.Listen || cfg.Server.AdminListen != old.AdminListen {
		g.opts.Logger.Warn("listen addresses changed; they take effect only after a restart")
	}
	if err := g.Reload(cfg, old.ShutdownTimeout); err != nil {
		err = cfg.Sourced(err)
		g.opts.Logger.Error("config reload failed; keeping the live configuration", slog.String("path", path), slog.String("error", err.Error()))
		return err
	}
	g.opts.Logger.Info("config reloaded", slog.String("path", path))
	return nil
}

// WatchFile reloads path whenever its content differs from the last
// content loaded, checking every interval, until ctx is done. loaded is
// the Digest of the content the live configuration was loaded from
// (config.LoadDigest): a change made after that load, even one made
// before WatchFile is called (a ConfigMap update or a deploy tool's write
// during the start), is reloaded at the first check. Comparing the content
// (not the modification time) also catches the atomic renames and symlink
// swaps with which editors and Kubernetes ConfigMaps replace files. A file
// that cannot be read is skipped until it can. It watches in a goroutine
// of its own.
func (g *Gateway) WatchFile(ctx context.Context, path string, interval time.Duration, loaded config.Digest) {
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		g.watchFile(ctx, path, t.C, loaded)
	}()
}

// watchFile compares the file with last at every tick and reloads when it
// differs. The first difference is logged as found since the start, when
// the file changed after the live configuration was loaded but before
// the first check.
func (g *Gateway) watchFile(ctx context.Context, path string, tick <-chan time.Time, last config.Digest) {
	since := "start"
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			d, ok := config.FileDigest(path)
			if !ok || d == last {
				since = "last check"
				continue
			}
			last = d
			g.opts.Logger.Info("config file changed; reloading", slog.String("path", path), slog.String("since", since))
			since = "last check"
			_ = g.ReloadFile(path)
		}
	}
}
