//go:build !norls

package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"google.golang.org/grpc/grpclog"

	"github.com/quotagate/quotagate/telemetry"
)

// The gRPC library's own lines (a connection that failed its handshake)
// are written from its connections' goroutines; by default straight to
// stderr, synchronously. grpcLog sends them through the gateway's logger.
func init() { grpclog.SetLoggerV2(newGRPCLog(os.Getenv)) }

// grpcLog is gRPC's logger: once the gateway runs (libraryLogger set), a
// line at or above min is logged through the gateway's logger, with
// message "grpc" and the text as "detail"; before, it is written to stderr
// as gRPC writes it. min and verbosity come from gRPC's own variables,
// GRPC_GO_LOG_SEVERITY_LEVEL ("error" when unset or unknown, "warning",
// "info") and GRPC_GO_LOG_VERBOSITY_LEVEL (0 when unset). A fatal line is
// written to stderr directly, for at most telemetry.StallTimeout,
// before the process exits with status 1.
type grpcLog struct {
	min       slog.Level
	verbosity int
}

func newGRPCLog(getenv func(string) string) grpcLog {
	g := grpcLog{min: slog.LevelError}
	switch strings.ToLower(getenv("GRPC_GO_LOG_SEVERITY_LEVEL")) {
	case "warning":
		g.min = slog.LevelWarn
	case "info":
		g.min = slog.LevelInfo
	}
	g.verbosity, _ = strconv.Atoi(getenv("GRPC_GO_LOG_VERBOSITY_LEVEL"))
	return g
}

// log writes text at level l.
func (g grpcLog) log(l slog.Level, text string) {
	logger := libraryLogger.Load()
	if logger == nil {
		fmt.Fprintln(os.Stderr, strings.ToUpper(l.String())+": "+text)
		return
	}
	logger.LogAttrs(context.Background(), l, "grpc", slog.String("detail", text))
}

func (g grpcLog) Info(args ...any)      { g.print(slog.LevelInfo, args) }
func (g grpcLog) Infoln(args ...any)    { g.println(slog.LevelInfo, args) }
func (g grpcLog) Warning(args ...any)   { g.print(slog.LevelWarn, args) }
func (g grpcLog) Warningln(args ...any) { g.println(slog.LevelWarn, args) }
func (g grpcLog) Error(args ...any)     { g.print(slog.LevelError, args) }
func (g grpcLog) Errorln(args ...any)   { g.println(slog.LevelError, args) }
func (g grpcLog) Infof(format string, args ...any) {
	g.printf(slog.LevelInfo, format, args)
}
func (g grpcLog) Warningf(format string, args ...any) {
	g.printf(slog.LevelWarn, format, args)
}
func (g grpcLog) Errorf(format string, args ...any) {
	g.printf(slog.LevelError, format, args)
}
func (g grpcLog) Fatal(args ...any)   { g.fatal(fmt.Sprint(args...)) }
func (g grpcLog) Fatalln(args ...any) { g.fatal(sprintln(args)) }
func (g grpcLog) Fatalf(format string, args ...any) {
	g.fatal(fmt.Sprintf(format, args...))
}

// print, println and printf format a line only when l is logged.
func (g grpcLog) print(l slog.Level, args []any) {
	if l >= g.min {
		g.log(l, fmt.Sprint(args...))
	}
}

func (g grpcLog) println(l slog.Level, args []any) {
	if l >= g.min {
		g.log(l, sprintln(args))
	}
}

func (g grpcLog) printf(l slog.Level, format string, args []any) {
	if l >= g.min {
		g.log(l, fmt.Sprintf(format, args...))
	}
}

// V reports whether verbosity level l is logged.
func (g grpcLog) V(l int) bool { return l <= g.verbosity }

// fatal writes text to stderr, waiting at most telemetry.StallTimeout for a
// stderr that may be stuck, and exits with status 1.
func (g grpcLog) fatal(text string) {
	_, _ = fmt.Fprintln(boundedWriter{w: os.Stderr, timeout: telemetry.StallTimeout}, "FATAL: "+text)
	os.Exit(1)
}

// sprintln is fmt.Sprintln without its newline.
func sprintln(args []any) string { return strings.TrimSuffix(fmt.Sprintln(args...), "\n") }
