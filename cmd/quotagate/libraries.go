package main

import (
	"log"
	"log/slog"
	"sync/atomic"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
)

// libraryLogger is the logger the libraries' own lines go to once the
// gateway runs (routeLibraryLogs); nil before, when they go to stderr as
// the libraries write them.
var libraryLogger atomic.Pointer[slog.Logger]

// routeLibraryLogs sends the lines that libraries would write to stderr
// themselves, synchronously and from any goroutine (a request's, a
// connection's, the shutdown's), through logger instead, so that they are
// queued and dropped like the gateway's own operational lines rather than
// waited for on a stuck stderr: the OpenTelemetry SDK's errors (a failed
// export) and internal log, gRPC's log (see grpcLog), and the standard log
// package's default logger, which an http.Server without an ErrorLog (the
// listener of OTEL_METRICS_EXPORTER=prometheus) writes its errors to, as a
// warning each, the line as its message.
func routeLibraryLogs(logger *slog.Logger) {
	otel.SetErrorHandler(otelErrors{logger})
	otel.SetLogger(logr.FromSlogHandler(logger.Handler()))
	log.SetFlags(0) // the record has its own time
	log.SetPrefix("")
	log.SetOutput(slog.NewLogLogger(logger.Handler(), slog.LevelWarn).Writer())
	libraryLogger.Store(logger)
}

// otelErrors logs the OpenTelemetry SDK's errors as warnings.
type otelErrors struct{ logger *slog.Logger }

func (h otelErrors) Handle(err error) {
	h.logger.Warn("telemetry export failed", slog.Any("error", err))
}
