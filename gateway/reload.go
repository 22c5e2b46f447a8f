package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"log/slog"
	"os"
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

// WatchFile reloads path whenever its content changes, checking every
// interval, until ctx is done. Polling the content (not the modification
// time) also catches the atomic renames with which editors and Kubernetes
// ConfigMaps replace files. It takes the content's digest before it
// returns, so a change made after WatchFile returns is never missed, and
// watches in a goroutine of its own.
func (g *Gateway) WatchFile(ctx context.Context, path string, interval time.Duration) {
	go g.watchFile(ctx, path, interval, fileDigest(path))
}

func (g *Gateway) watchFile(ctx context.Context, path string, interval time.Duration, last []byte) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d := fileDigest(path)
			if d == nil || bytes.Equal(d, last) {
				continue
			}
			last = d
			_ = g.ReloadFile(path)
		}
	}
}

func fileDigest(path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	sum := sha256.Sum256(b)
	return sum[:]
}
