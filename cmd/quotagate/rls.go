//go:build !norls

package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/gateway"
	"github.com/quotagate/quotagate/rls"
	"github.com/quotagate/quotagate/telemetry"
	"go.opentelemetry.io/otel/trace"
)

// checkRLSFiles reports the problems of the descriptor files cfg names.
func checkRLSFiles(cfg *config.Config) error {
	_, err := rls.LoadFiles(cfg.RLS.ConfigFiles)
	return err
}

// startRLS builds the decision service of cfg.RLS on a store of its own,
// opened by open (the gateway's opener, so the process registers in the
// fleet once), and opens its listeners. It returns nil when the section is
// off.
func startRLS(cfg *config.Config, open gateway.OpenStore, logger *slog.Logger, metrics *telemetry.Metrics, tp trace.TracerProvider, getenv func(string) (string, bool)) (*decisionService, error) {
	if !cfg.RLS.Enabled() {
		return nil, nil
	}
	backend, err := open(cfg.Store)
	if err != nil {
		return nil, err
	}
	srv, err := rls.NewServer(cfg, rls.ServerOptions{Store: backend, Logger: logger, Metrics: metrics, TracerProvider: tp, Getenv: getenv})
	if err != nil {
		backend.Close()
		return nil, err
	}
	ds := &decisionService{srv: srv, closeStore: backend.Close}
	listen := func(path, addr string) (net.Listener, error) {
		if addr == "" {
			return nil, nil
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return l, nil
	}
	if ds.grpc, err = listen("rls.listen", cfg.RLS.Listen); err == nil {
		ds.http, err = listen("rls.http_listen", cfg.RLS.HTTPListen)
	}
	if err != nil {
		if ds.grpc != nil {
			ds.grpc.Close()
		}
		backend.Close()
		return nil, err
	}
	attrs := []slog.Attr{}
	if ds.grpc != nil {
		attrs = append(attrs, slog.String("listen", ds.grpc.Addr().String()))
	}
	if ds.http != nil {
		attrs = append(attrs, slog.String("http_listen", ds.http.Addr().String()))
	}
	logger.LogAttrs(context.Background(), slog.LevelInfo, "rls started", attrs...)
	return ds, nil
}
