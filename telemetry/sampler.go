package telemetry

import (
	"fmt"
	"strconv"
	"strings"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

const (
	envSampler    = "OTEL_TRACES_SAMPLER"
	envSamplerArg = "OTEL_TRACES_SAMPLER_ARG"
)

// samplerFromEnv reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG with
// the values the OpenTelemetry specification defines, and returns the SDK
// sampler and the same rule in the form TracerProvider applies before it
// builds a span. Unset means parentbased_always_on. A ratio sampler without
// an argument samples everything (ratio 1.0). An unknown sampler, or a ratio
// argument that is not a number in [0, 1], is an error rather than a silent
// fallback.
func samplerFromEnv(getenv func(string) string) (sdktrace.Sampler, sampling, error) {
	name := strings.ToLower(strings.TrimSpace(getenv(envSampler)))
	arg := strings.TrimSpace(getenv(envSamplerArg))
	ratio := func() (float64, error) {
		if arg == "" {
			return 1, nil
		}
		v, err := strconv.ParseFloat(arg, 64)
		if err != nil || v < 0 || v > 1 {
			return 0, fmt.Errorf("telemetry: %s=%q: want a number in [0, 1]", envSamplerArg, arg)
		}
		return v, nil
	}
	switch name {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), sampling{parentBased: true, bound: boundAll}, nil
	case "always_on":
		return sdktrace.AlwaysSample(), sampling{bound: boundAll}, nil
	case "always_off":
		return sdktrace.NeverSample(), sampling{}, nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), sampling{parentBased: true}, nil
	case "traceidratio", "parentbased_traceidratio":
		v, err := ratio()
		if err != nil {
			return nil, sampling{}, err
		}
		s, rule := sdktrace.TraceIDRatioBased(v), sampling{bound: ratioBound(v)}
		if name == "parentbased_traceidratio" {
			s, rule.parentBased = sdktrace.ParentBased(s), true
		}
		return s, rule, nil
	default:
		return nil, sampling{}, fmt.Errorf("telemetry: %s=%q: unsupported sampler", envSampler, name)
	}
}
