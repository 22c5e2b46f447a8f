package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/gateway"
	"github.com/quotagate/quotagate/telemetry"
)

// runServe runs the gateway until ctx is done (SIGINT/SIGTERM), reloading the
// config on SIGHUP and when the file changes.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("quotagate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "config.yaml", "config file")
	watch := fs.Duration("watch-interval", time.Second, "how often to check the config file for changes (0 = only on SIGHUP)")
	addrFile := fs.String("addr-file", "", "once both listeners are bound, write their addresses to this file as JSON (for port 0)")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return unknownCommand(fs.Arg(0))
	}
	// SIGHUP is caught from before the config is read: during the start
	// (which may wait a second on the store check, more on a stuck
	// stderr) its default action would end the process, and a config
	// pushed then would be missed. One that arrives before the gateway
	// serves is acted on once it does (a reload, harmless when the file
	// is unchanged).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	// The one reader of the environment for what the config names: its
	// QUOTAGATE_* overrides and every secret (JWT, admin and decision
	// service tokens, the Redis password), at start and on reloads.
	getenv := os.LookupEnv
	cfg, loaded, err := config.LoadDigest(*path, getenv)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	level, err := telemetry.ParseLevel(string(cfg.Log.Level))
	if err != nil {
		return usageErr("log.level: %v", err)
	}
	// Every line goes through one LogSink, written to stderr by one
	// goroutine, so lines never interleave; a line is dropped and counted
	// when the sink's buffer is full or stderr has stalled. Until the
	// gateway has started, an operational line waits to be written (a
	// start's errors reach stderr before the exit they explain), at most
	// until stderr stalls (telemetry.StallTimeout: a stderr stuck before
	// the start delays it by that bound, not for ever). The deferred
	// Close, run last, writes what is left after the gateway has stopped,
	// for at most telemetry.StallTimeout: when stderr does not read, the
	// lines it would not take are lost, and the count Close returns has
	// nowhere to go but that stderr.
	logOut := telemetry.NewLogSink(stderr, telemetry.DefaultLogLines)
	defer func() { _ = logOut.Close() }()
	logger := telemetry.NewLogger(logOut, level)
	routeLibraryLogs(logger)
	applyMemoryDefaults(logger, *cfg.Server.HeapFloorBytes)
	redis.SetLogger(redisLog{logger})

	host, _ := os.Hostname()
	tel, err := telemetry.Setup(ctx, telemetry.Options{ServiceVersion: version, InstanceID: fmt.Sprintf("%s-%d", host, os.Getpid())})
	if err != nil {
		return runtimeErr(fmt.Errorf("telemetry: %w", err))
	}
	defer func() { _ = shutdownWithin(tel.Shutdown, telemetryFlushTimeout) }()
	otel.SetTextMapPropagator(tel.Propagator)
	metrics, err := telemetry.NewMetrics(tel.MeterProvider)
	if err != nil {
		return runtimeErr(fmt.Errorf("metrics: %w", err))
	}
	tel.ExportPrimed(metrics)
	if err := metrics.ObserveLogDrops(logOut.Drops); err != nil {
		return runtimeErr(fmt.Errorf("metrics: %w", err))
	}

	// The metrics of the regions are the gateway's: they follow the store
	// of its current configuration (gateway.New).
	open := storeOpener(logger, getenv)
	gw, err := gateway.New(cfg, gateway.Options{
		Getenv:         getenv,
		OpenStore:      open,
		Logger:         logger,
		AccessLog:      telemetry.NewLogger(logOut.Access(), level),
		Metrics:        metrics,
		TracerProvider: tel.TracerProvider,
		Propagator:     tel.Propagator,
		Transport:      newTransport(cfg.Server),
	})
	if err != nil {
		var invalid config.Errors
		if errors.As(err, &invalid) { // a variable the config names is missing
			return &exitError{code: 1, err: cfg.Sourced(err)}
		}
		return runtimeErr(err)
	}
	defer gw.Close()

	pub, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		return runtimeErr(fmt.Errorf("server.listen: %w", err))
	}
	adm, err := net.Listen("tcp", cfg.Server.AdminListen)
	if err != nil {
		pub.Close()
		return runtimeErr(fmt.Errorf("server.admin_listen: %w", err))
	}
	ds, err := startRLS(cfg, open, logger, metrics, tel.TracerProvider, getenv)
	if err != nil {
		pub.Close()
		adm.Close()
		var invalid config.Errors
		if errors.As(err, &invalid) { // rls.client_auth.token_env's variable is missing
			return &exitError{code: 1, err: cfg.Sourced(err)}
		}
		return runtimeErr(err)
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_ = gw.ReloadFile(*path)
				if ds != nil {
					_ = ds.srv.ReloadFile(*path)
				}
			}
		}
	}()
	// The watchers compare the file with the content loaded above, not
	// with what it holds now: a change made during the start (a ConfigMap
	// update, a deploy tool's write) is reloaded at their first check.
	if *watch > 0 {
		gw.WatchFile(ctx, *path, *watch, loaded)
		if ds != nil {
			ds.srv.Watch(ctx, *path, *watch, loaded)
		}
	}
	if *addrFile != "" {
		if err := writeAddrFile(*addrFile, pub.Addr(), adm.Addr()); err != nil {
			pub.Close()
			adm.Close()
			ds.close()
			return runtimeErr(fmt.Errorf("-addr-file: %w", err))
		}
	}
	logger.Info("quotagate started", slog.String("version", version), slog.String("listen", pub.Addr().String()),
		slog.String("admin_listen", adm.Addr().String()), slog.String("store", string(cfg.Store.Kind)), slog.String("config", *path))
	logOut.Started()

	ctx, stop := context.WithCancel(ctx)
	defer stop()
	rlsDone := make(chan error, 1)
	if ds != nil {
		go func() {
			rlsDone <- ds.srv.Serve(ctx, ds.grpc, ds.http, cfg.Server.ShutdownTimeout)
			stop() // a failed decision service stops the process
		}()
	} else {
		rlsDone <- nil
	}
	err = gw.Serve(ctx, pub, adm, gw.Admin(tel.Metrics))
	stop()
	rerr := <-rlsDone
	if ds != nil {
		ds.closeStore()
	}
	if err == nil {
		err = rerr
	}
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	logger.Info("quotagate stopped")
	return nil
}

// telemetryFlushTimeout bounds the flush of exported telemetry on exit.
const telemetryFlushTimeout = 5 * time.Second

// shutdownWithin calls shutdown with a context of the given timeout and
// returns its error, or context.DeadlineExceeded once the timeout has
// passed (within), leaving shutdown running: the SDK's periodic metric
// reader waits for its exporter's last Export whatever the context says,
// and the console exporter's Export is a write to stdout, which a reader
// that hung never lets return.
func shutdownWithin(shutdown func(context.Context) error, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err, ok := within(timeout, nil, func() error { return shutdown(ctx) })
	if !ok {
		return context.DeadlineExceeded
	}
	return err
}
