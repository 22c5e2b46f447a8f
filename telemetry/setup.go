package telemetry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/attribute"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// DefaultServiceName is the service.name used when neither Options.ServiceName
// nor OTEL_SERVICE_NAME is set.
const DefaultServiceName = "quotagate"

// Options configures Setup. The zero value is usable.
type Options struct {
	// ServiceName is the resource's service.name. Empty means the value of
	// OTEL_SERVICE_NAME, and DefaultServiceName when that is empty too.
	ServiceName string
	// ServiceVersion is the resource's service.version; empty leaves it out.
	ServiceVersion string
	// InstanceID is the resource's service.instance.id. Empty means
	// "<hostname>-<pid>", or 16 random hex digits when the host name is unknown.
	InstanceID string
	// Getenv reads an environment variable; nil means os.Getenv. It decides
	// what Setup itself decides: whether each signal is exported, the sampler
	// (OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG) and OTEL_SERVICE_NAME. The
	// exporters chosen then read their own settings (endpoint, protocol,
	// headers, timeouts, TLS) and the SDK reads OTEL_RESOURCE_ATTRIBUTES from
	// the process environment, as the OpenTelemetry libraries always do.
	Getenv func(string) string
}

// Providers holds what Setup built. None of it is installed globally.
type Providers struct {
	// TracerProvider is a *TracerProvider: it samples by
	// OTEL_TRACES_SAMPLER (parentbased_always_on when unset) before it builds
	// a span, creates nothing for a span that is not sampled, and records
	// sampled spans only when traces are exported. A sampled span has its
	// ids either way, so trace ids reach logs and upstreams.
	TracerProvider trace.TracerProvider
	// MeterProvider feeds the Prometheus handler and, when configured, an
	// OTLP (or other OTEL_METRICS_EXPORTER) periodic reader. Its readers
	// also collect the histograms of the last Metrics NewMetrics created on
	// it, which the SDK does not hold (see asyncHistogram), except a reader
	// autoexport builds for an OTEL_METRICS_EXPORTER other than otlp,
	// console and prometheus (see newMetricReader).
	MeterProvider metric.MeterProvider
	// Propagator handles W3C tracecontext and baggage headers.
	Propagator propagation.TextMapPropagator
	// Metrics serves the Prometheus text exposition of MeterProvider's
	// instruments, plus the Go runtime and process collectors, from a
	// registry of its own (not prometheus.DefaultRegisterer).
	Metrics http.Handler
	// Shutdown flushes pending spans and metrics and stops the exporters. It
	// honours ctx's deadline and returns every error met. Call it once.
	Shutdown func(context.Context) error

	// attached is the Metrics whose histograms the readers collect: the
	// last one NewMetrics created on MeterProvider.
	attached atomic.Pointer[Metrics]
	// primed is the Metrics whose primed histogram series Metrics serves.
	primed atomic.Pointer[Metrics]
	// exemplars is the exemplarMode the attached Metrics records in.
	exemplars exemplarMode

	// tracesExported and metricsExported tell whether an exporter other than
	// the Prometheus handler was attached.
	tracesExported  bool
	metricsExported bool
}

// Environment variables that decide whether anything is exported.
const (
	envTracesExporter  = "OTEL_TRACES_EXPORTER"
	envMetricsExporter = "OTEL_METRICS_EXPORTER"
	envOTLPEndpoint    = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint  = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envMetricsEndpoint = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
	envServiceName     = "OTEL_SERVICE_NAME"
)

// exportWanted reports whether a signal should get an exporter. An explicit
// OTEL_<SIGNAL>_EXPORTER (including "none") is handed to autoexport, which
// honours it. Without one, autoexport would default to OTLP towards
// localhost; quotagate instead exports only when an OTLP endpoint is set, so
// a bare start sends nothing anywhere.
func exportWanted(getenv func(string) string, exporterVar, signalEndpointVar string) bool {
	if getenv(exporterVar) != "" {
		return true
	}
	return getenv(envOTLPEndpoint) != "" || getenv(signalEndpointVar) != ""
}

// Setup builds the tracer and meter providers from o and the standard OTEL_*
// environment variables. Traces are exported when OTEL_TRACES_EXPORTER or an
// OTLP traces endpoint (OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set; metrics likewise with
// OTEL_METRICS_EXPORTER and the metrics endpoint. OTEL_EXPORTER_OTLP_PROTOCOL
// selects "http/protobuf" (default) or "grpc". An unknown exporter, protocol
// or sampler is an error, and nothing is left running. Other exporter values
// autoexport knows are honoured as it defines them: "console" writes to
// stdout, and OTEL_METRICS_EXPORTER=prometheus opens its own listener
// (OTEL_EXPORTER_PROMETHEUS_HOST/PORT) besides Providers.Metrics.
func Setup(ctx context.Context, o Options) (*Providers, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if _, _, err := samplerFromEnv(getenv); err != nil {
		return nil, err
	}
	res := newResource(o, getenv)

	var cleanup []func(context.Context) error
	fail := func(err error) (*Providers, error) {
		for _, f := range cleanup {
			err = errors.Join(err, f(ctx))
		}
		return nil, err
	}

	p := &Providers{}
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if exportWanted(getenv, envTracesExporter, envTracesEndpoint) {
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return fail(fmt.Errorf("telemetry: traces exporter: %w", err))
		}
		if autoexport.IsNoneSpanExporter(exp) {
			_ = exp.Shutdown(ctx)
		} else {
			tpOpts = append(tpOpts, sdktrace.WithBatcher(exp))
			p.tracesExported = true
			cleanup = append(cleanup, exp.Shutdown)
		}
	}

	reg := prometheus.NewRegistry()
	prom, err := promexporter.New(
		promexporter.WithRegisterer(reg),
		promexporter.WithProducer(newHistProducer(p.attached.Load, metricdata.CumulativeTemporality)),
		promexporter.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		promexporter.WithoutTargetInfo(),
		promexporter.WithoutScopeInfo(),
	)
	if err != nil {
		return fail(fmt.Errorf("telemetry: prometheus exporter: %w", err))
	}
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return fail(fmt.Errorf("telemetry: go collector: %w", err))
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return fail(fmt.Errorf("telemetry: process collector: %w", err))
	}
	mpOpts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(prom)}
	if exportWanted(getenv, envMetricsExporter, envMetricsEndpoint) {
		rd, err := newMetricReader(ctx, p.attached.Load)
		if err != nil {
			return fail(fmt.Errorf("telemetry: metrics exporter: %w", err))
		}
		if autoexport.IsNoneMetricReader(rd) {
			_ = rd.Shutdown(ctx)
		} else {
			mpOpts = append(mpOpts, sdkmetric.WithReader(rd))
			p.metricsExported = true
		}
	}

	tp, err := NewTracerProvider(getenv, p.tracesExported, tpOpts...)
	if err != nil {
		return fail(err)
	}
	if exemplarsOff(getenv, p.tracesExported) {
		mpOpts = append(mpOpts, sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter))
	}
	p.exemplars = exemplarModeFrom(getenv, exemplarsOff(getenv, p.tracesExported))
	mp := sdkmetric.NewMeterProvider(mpOpts...)
	p.TracerProvider = tp
	p.MeterProvider = meterProvider{mp, p}
	p.Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	p.Metrics = promhttp.HandlerFor(primedGatherer{inner: reg, metrics: p.primed.Load},
		promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	p.Shutdown = func(ctx context.Context) error {
		// The tracer provider shuts its span processors and exporters down;
		// the meter provider does the same for every reader.
		return errors.Join(tp.Shutdown(ctx), mp.Shutdown(ctx))
	}
	return p, nil
}

// envExemplarFilter is the SDK's own setting of which measurements may
// become exemplars.
const envExemplarFilter = "OTEL_METRICS_EXEMPLAR_FILTER"

// exemplarsOff reports whether measurements are kept from becoming
// exemplars: when traces are not exported, unless OTEL_METRICS_EXEMPLAR_FILTER
// says otherwise. An exemplar links a measurement to its sampled trace; with
// no trace exported it would name a trace that exists nowhere, and offering
// every measurement made under a sampled span to the reservoir is most of
// what recording a counter costs.
func exemplarsOff(getenv func(string) string, tracesExported bool) bool {
	return !tracesExported && strings.TrimSpace(getenv(envExemplarFilter)) == ""
}

// ExportPrimed makes the Metrics handler serve the histogram series m is
// primed with (Metrics.Prime) empty, at zero, until they are first
// recorded. m must have been created on p.MeterProvider. A later call
// replaces m.
func (p *Providers) ExportPrimed(m *Metrics) { p.primed.Store(m) }

// meterProvider is the SDK's meter provider of Setup, through which
// NewMetrics finds the readers its histograms are to be collected by.
type meterProvider struct {
	*sdkmetric.MeterProvider
	p *Providers
}

// collectHistogramsOf makes every reader of the provider (the Metrics
// handler's and the exporter's) collect m's histograms, which the SDK does
// not see (see asyncHistogram), and sets m's exemplar mode to the one the
// provider's exemplar filter has. A later call replaces m.
func (mp meterProvider) collectHistogramsOf(m *Metrics) {
	m.exemplars.Store(int32(mp.p.exemplars))
	mp.p.attached.Store(m)
}

// newResource describes this process: service.name, service.version and
// service.instance.id on top of the SDK defaults (telemetry.sdk.*).
func newResource(o Options, getenv func(string) string) *resource.Resource {
	name := o.ServiceName
	if name == "" {
		name = getenv(envServiceName)
	}
	if name == "" {
		name = DefaultServiceName
	}
	id := o.InstanceID
	if id == "" {
		id = defaultInstanceID()
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(name), semconv.ServiceInstanceID(id)}
	if o.ServiceVersion != "" {
		attrs = append(attrs, semconv.ServiceVersion(o.ServiceVersion))
	}
	// Schemaless, so merging never fails on differing schema URLs; the
	// second resource's values win.
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil {
		return resource.NewSchemaless(attrs...)
	}
	return res
}

// defaultInstanceID returns "<hostname>-<pid>", or random hex digits when the
// host name cannot be read.
func defaultInstanceID() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h + "-" + strconv.Itoa(os.Getpid())
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms.
	return hex.EncodeToString(b[:])
}
