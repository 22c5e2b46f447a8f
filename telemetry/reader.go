package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	prometheusbridge "go.opentelemetry.io/contrib/bridges/prometheus"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// Environment variables the metric reader is chosen by, as autoexport
// reads them: from the process environment.
const (
	envMetricsProducers    = "OTEL_METRICS_PRODUCERS"
	envOTLPProtocol        = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envOTLPMetricsProtocol = "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"
	defaultOTLPProtocol    = "http/protobuf"
	metricsExporterOTLP    = "otlp"
	metricsExporterConsole = "console"
	metricsProducerBridge  = "prometheus"
	metricsProducerNone    = "none"
)

// newMetricReader returns the periodic reader OTEL_METRICS_EXPORTER names,
// built as autoexport builds it but with a producer of the histograms kept
// in cells (histProducer) in the temporality its exporter asks of a
// histogram: "otlp" (the default; OTEL_EXPORTER_OTLP_METRICS_PROTOCOL or
// OTEL_EXPORTER_OTLP_PROTOCOL chooses "http/protobuf", the default, or
// "grpc") and "console". Other values are autoexport's to build (and its
// readers have no such producer): "none", and "prometheus", whose listener
// of its own serves no histogram. OTEL_METRICS_PRODUCERS adds the
// producers autoexport knows, "prometheus" and "none"; another value is an
// error.
func newMetricReader(ctx context.Context, metrics func() *Metrics) (sdkmetric.Reader, error) {
	var exp sdkmetric.Exporter
	var err error
	switch name := strings.TrimSpace(os.Getenv(envMetricsExporter)); name {
	case "", metricsExporterOTLP:
		exp, err = newOTLPMetricExporter(ctx)
	case metricsExporterConsole:
		exp, err = stdoutmetric.New()
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
