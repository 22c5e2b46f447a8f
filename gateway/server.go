package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/quotagate/quotagate/internal/listenaddr"
)

// The admin listener's deadlines. Its requests have no body, so reading
// one takes no longer than its headers. Writing an answer is quick except
// for the profiles, which stream for as long as asked (/debug/pprof/profile
// for 30 s by default): net/http/pprof moves the write deadline of those
// (profile, trace, the delta profiles) to WriteTimeout plus the seconds
// asked, so the write timeout bounds everything else and cuts no profile.
// adminWriteTimeout is a variable for tests only.
const adminReadTimeout = 10 * time.Second

var adminWriteTimeout = 30 * time.Second

// Serve runs the public handler on pub and the admin handler on admin until
// ctx is done, then stops accepting, lets in-flight requests finish for at
// most the configured shutdown_timeout, and returns. It returns nil after a
// clean drain, or the error that stopped a listener.
func (g *Gateway) Serve(ctx context.Context, pub, admin net.Listener, adminHandler http.Handler) error {
	s := g.Config().Server
	public := &http.Server{
		Handler:           g,
		ReadHeaderTimeout: s.ReadHeaderTimeout,
		IdleTimeout:       s.IdleTimeout,
		MaxHeaderBytes:    s.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(g.opts.Logger.Handler(), slog.LevelDebug),
	}
	adm := &http.Server{
		Handler:           g.checkAdminHost(adminHandler),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       adminReadTimeout,
		WriteTimeout:      adminWriteTimeout,
		// A kept-alive admin connection (a scraper's, a console's) is
		// closed after server.idle_timeout without a request, as on the
		// public listener; read at start, like the listeners.
		IdleTimeout: s.IdleTimeout,
		ErrorLog:    slog.NewLogLogger(g.opts.Logger.Handler(), slog.LevelDebug),
	}
	g.adminLoopback.Store(listenaddr.Loopback(admin.Addr()))
	// The console's history is sampled while the admin listener serves.
	hctx, stopHistory := context.WithCancel(ctx)
	historyDone := make(chan struct{})
	go func() { defer close(historyDone); g.recordHistory(hctx) }()
	defer func() { stopHistory(); <-historyDone }()
	errc := make(chan error, 2)
	go func() { errc <- public.Serve(pub) }()
	go func() { errc <- adm.Serve(admin) }()

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	timeout := g.Config().Server.ShutdownTimeout
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	g.opts.Logger.Info("shutting down", slog.Duration("drain_timeout", timeout))
	derr := public.Shutdown(sctx)
	_ = adm.Shutdown(sctx)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	if err != nil {
		return err
	}
	if derr != nil {
		return errors.New("shutdown: in-flight requests did not finish within shutdown_timeout")
	}
	return nil
}
