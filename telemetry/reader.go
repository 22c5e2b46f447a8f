package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	prometheusbridge "go.opentelemetry.io/contrib/bridges/prometheus"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Environment variables the metric reader is chosen by, as autoexport
// reads them: from the process environment.
const (
	envMetricsProducers       = "OTEL_METRICS_PRODUCERS"
	envOTLPProtocol           = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envOTLPMetricsProtocol    = "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"
	defaultOTLPProtocol       = "http/protobuf"
	metricsExporterOTLP       = "otlp"
	metricsExporterConsole    = "console"
	metricsExporterPrometheus = "prometheus"
	metricsProducerBridge     = "prometheus"
	metricsProducerNone       = "none"
)

// newMetricReader returns the reader OTEL_METRICS_EXPORTER names, built as
// autoexport builds it but with a producer of the histograms kept in cells
// (histProducer) in the temporality its exporter asks of a histogram:
// "otlp" (the default; OTEL_EXPORTER_OTLP_METRICS_PROTOCOL or
// OTEL_EXPORTER_OTLP_PROTOCOL chooses "http/protobuf", the default, or
// "grpc"), "console", and "prometheus" (see newPrometheusListener). Other
// values ("none", or one autoexport rejects) are autoexport's.
// OTEL_METRICS_PRODUCERS adds the producers autoexport knows to the
// periodic readers, "prometheus" and "none" (the Prometheus reader takes
// neither, as with autoexport); another value is an error.
func newMetricReader(ctx context.Context, metrics func() *Metrics) (sdkmetric.Reader, error) {
	var exp sdkmetric.Exporter
	var err error
	switch name := strings.TrimSpace(os.Getenv(envMetricsExporter)); name {
	case "", metricsExporterOTLP:
		exp, err = newOTLPMetricExporter(ctx)
	case metricsExporterConsole:
		exp, err = stdoutmetric.New()
	case metricsExporterPrometheus:
		if _, err := extraProducers(); err != nil {
			return nil, err
		}
		return newPrometheusListener(metrics)
	default:
		return autoexport.NewMetricReader(ctx)
	}
	if err != nil {
		return nil, err
	}
	opts, err := extraProducers()
	if err != nil {
		return nil, errors.Join(err, exp.Shutdown(ctx))
	}
	opts = append(opts, sdkmetric.WithProducer(newHistProducer(metrics, exp.Temporality(sdkmetric.InstrumentKindHistogram))))
	return sdkmetric.NewPeriodicReader(exp, opts...), nil
}

// newOTLPMetricExporter is the OTLP exporter of the protocol the
// environment chooses.
func newOTLPMetricExporter(ctx context.Context) (sdkmetric.Exporter, error) {
	proto := os.Getenv(envOTLPMetricsProtocol)
	if proto == "" {
		proto = os.Getenv(envOTLPProtocol)
	}
	switch proto {
	case "", defaultOTLPProtocol:
		return otlpmetrichttp.New(ctx)
	case "grpc":
		return otlpmetricgrpc.New(ctx)
	}
	return nil, fmt.Errorf("telemetry: %s or %s: invalid OTLP protocol %q, want grpc or http/protobuf",
		envOTLPMetricsProtocol, envOTLPProtocol, proto)
}

// extraProducers are the reader options of the producers
// OTEL_METRICS_PRODUCERS names.
func extraProducers() ([]sdkmetric.PeriodicReaderOption, error) {
	v := os.Getenv(envMetricsProducers)
	if v == "" {
		return nil, nil
	}
	var opts []sdkmetric.PeriodicReaderOption
	bridged := false
	for name := range strings.SplitSeq(v, ",") {
		switch name {
		case metricsProducerBridge:
			if !bridged {
				opts = append(opts, sdkmetric.WithProducer(prometheusbridge.NewMetricProducer()))
				bridged = true
			}
		case metricsProducerNone:
		default:
			return nil, fmt.Errorf("telemetry: %s: unknown metrics producer %q, want prometheus or none", envMetricsProducers, name)
		}
	}
	return opts, nil
}

// Where the listener of OTEL_METRICS_EXPORTER=prometheus listens, and its
// defaults, as autoexport reads them.
const (
	envPrometheusHost     = "OTEL_EXPORTER_PROMETHEUS_HOST"
	envPrometheusPort     = "OTEL_EXPORTER_PROMETHEUS_PORT"
	defaultPrometheusHost = "localhost"
	defaultPrometheusPort = "9464"
)

// prometheusListener is the reader of OTEL_METRICS_EXPORTER=prometheus
// with the HTTP server that serves its registry on /metrics.
type prometheusListener struct {
	sdkmetric.Reader
	addr   net.Addr
	server *http.Server
}

// newPrometheusListener builds the reader of OTEL_METRICS_EXPORTER=prometheus
// as autoexport does (a Prometheus exporter on a registry of its own,
// served on /metrics of OTEL_EXPORTER_PROMETHEUS_HOST:PORT, localhost:9464
// by default), with the histograms' producer. It fails if the address
// cannot be listened on.
func newPrometheusListener(metrics func() *Metrics) (sdkmetric.Reader, error) {
	reg := prometheus.NewRegistry()
	reader, err := promexporter.New(promexporter.WithRegisterer(reg),
		promexporter.WithProducer(newHistProducer(metrics, metricdata.CumulativeTemporality)))
	if err != nil {
		return nil, err
	}
	host, port := os.Getenv(envPrometheusHost), os.Getenv(envPrometheusPort)
	if host == "" {
		host = defaultPrometheusHost
	}
	if port == "" {
		port = defaultPrometheusPort
	}
	lis, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("telemetry: %s and %s: %w", envPrometheusHost, envPrometheusPort, err),
			reader.Shutdown(context.Background()))
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	server := &http.Server{Handler: mux, ReadTimeout: 5 * time.Second, WriteTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	go func() {
		if err := server.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			otel.Handle(fmt.Errorf("telemetry: the Prometheus listener stopped: %w", err))
		}
	}()
	return prometheusListener{Reader: reader, addr: lis.Addr(), server: server}, nil
}

// Shutdown stops the reader and the server, and returns both errors.
func (l prometheusListener) Shutdown(ctx context.Context) error {
	return errors.Join(l.Reader.Shutdown(ctx), l.server.Shutdown(ctx))
}
