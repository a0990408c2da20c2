package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/weftrun/weft"
)

// This file sets up tracing from the standard OpenTelemetry environment, as
// the SDKs' autoexport does:
//
//   - OTEL_SDK_DISABLED=true turns it off;
//   - OTEL_TRACES_EXPORTER picks the exporter: none (the default: no spans
//     are made at all), otlp (OTLP over HTTP/protobuf, configured by the
//     OTEL_EXPORTER_OTLP_* variables) or console (JSON spans on stderr);
//   - OTEL_TRACES_SAMPLER(_ARG), OTEL_SERVICE_NAME and
//     OTEL_RESOURCE_ATTRIBUTES are read by the SDK.
//
// TRACEPARENT (and TRACESTATE) in the environment, as W3C Trace Context,
// make the commands' submissions continue that trace.

// tracing is the CLI's tracer provider; nil when tracing is off.
type tracing struct {
	provider *sdktrace.TracerProvider
}

// setupTracing builds the tracer provider the command's engine uses and
// puts the trace of $TRACEPARENT in the command's context.
func (a *app) setupTracing(ctx context.Context) (context.Context, error) {
	if tp := a.getenv("TRACEPARENT"); tp != "" {
		carrier := propagation.MapCarrier{"traceparent": tp, "tracestate": a.getenv("TRACESTATE")}
		next := propagation.TraceContext{}.Extract(ctx, carrier)
		if !trace.SpanContextFromContext(next).IsValid() {
			return ctx, usageErrorf("TRACEPARENT %q is not a W3C traceparent (00-<32 hex trace id>-<16 hex span id>-<2 hex flags>)", tp)
		}
		ctx = next
	}
	exporter, err := a.traceExporter()
	if err != nil || exporter == nil {
		return ctx, err
	}
	service := "weft"
	if a.config.fromFile("OTEL_SERVICE_NAME") {
		service = a.config.env("OTEL_SERVICE_NAME")
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service), attribute.String("service.version", weft.Version)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return ctx, usageErrorf("OTEL_RESOURCE_ATTRIBUTES: %v", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exporter), sdktrace.WithResource(res)}
	if a.config.fromFile("OTEL_TRACES_SAMPLER") || a.config.fromFile("OTEL_TRACES_SAMPLER_ARG") {
		s, err := sampler(a.config.env("OTEL_TRACES_SAMPLER"), a.config.env("OTEL_TRACES_SAMPLER_ARG"))
		if err != nil {
			return ctx, usageErrorf("telemetry.sampler: %v", err)
		}
		opts = append(opts, sdktrace.WithSampler(s))
	}
	a.tracing.provider = sdktrace.NewTracerProvider(opts...)
	// The SDK reports export failures (a collector that is down) to
	// OpenTelemetry's process-wide error handler, which prints plain text
	// by default: log them as the command's other logs instead.
	log := a.log
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("telemetry: export failed", "error", err)
	}))
	return ctx, nil
}

// traceExporter returns the exporter $OTEL_TRACES_EXPORTER names, nil for
// none.
func (a *app) traceExporter() (sdktrace.SpanExporter, error) {
	if strings.EqualFold(strings.TrimSpace(a.config.env("OTEL_SDK_DISABLED")), "true") {
		return nil, nil
	}
	name := strings.ToLower(strings.TrimSpace(a.config.env("OTEL_TRACES_EXPORTER")))
	switch name {
	case "", "none":
		return nil, nil
	case "console":
		exp, err := stdouttrace.New(stdouttrace.WithWriter(a.logOut))
		if err != nil {
			return nil, fmt.Errorf("console trace exporter: %w", err)
		}
		return exp, nil
	case "otlp":
		proto := a.config.env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
		if proto == "" {
			proto = a.config.env("OTEL_EXPORTER_OTLP_PROTOCOL")
		}
		if proto != "" && proto != "http/protobuf" {
			return nil, usageErrorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: weft exports OTLP over http/protobuf only", proto)
		}
		// The exporter reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, _HEADERS,
		// _TIMEOUT and the TLS settings itself; it connects lazily. The
		// endpoint and headers may come from the configuration file instead.
		var opts []otlptracehttp.Option
		if a.config.fromFile("OTEL_EXPORTER_OTLP_ENDPOINT") {
			opts = append(opts, otlptracehttp.WithEndpointURL(a.config.env("OTEL_EXPORTER_OTLP_ENDPOINT")))
		}
		if a.config.fromFile("OTEL_EXPORTER_OTLP_HEADERS") {
			h, err := parseHeaders(a.config.env("OTEL_EXPORTER_OTLP_HEADERS"))
			if err != nil {
				return nil, usageErrorf("telemetry.otlp_headers: %v", err)
			}
			opts = append(opts, otlptracehttp.WithHeaders(h))
		}
		exp, err := otlptracehttp.New(context.Background(), opts...)
		if err != nil {
			return nil, fmt.Errorf("otlp trace exporter: %w", err)
		}
		return exp, nil
	}
	return nil, usageErrorf("OTEL_TRACES_EXPORTER %q: want otlp, console or none", name)
}

// tracerProvider returns the provider engines get; nil when tracing is off.
func (a *app) tracerProvider() trace.TracerProvider {
	if a.tracing.provider == nil {
		return nil
	}
	return a.tracing.provider
}

// shutdownTracing flushes the spans not yet exported, waiting at most five
// seconds.
func (a *app) shutdownTracing() {
	if a.tracing.provider == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.tracing.provider.Shutdown(ctx); err != nil {
		a.log.Warn("flush traces", "error", err)
	}
	a.tracing.provider = nil
}

// parseHeaders reads OTLP headers, "k1=v1,k2=v2".
func parseHeaders(s string) (map[string]string, error) {
	h := map[string]string{}
	for item := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(item, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, errors.New("want name=value pairs separated by commas")
		}
		h[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return h, nil
}

// sampler builds the sampler the configuration file names, with the
// values of OTEL_TRACES_SAMPLER (the SDK reads the environment itself).
func sampler(name, arg string) (sdktrace.Sampler, error) {
	ratio := func() (float64, error) {
		if arg == "" {
			return 1, nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return 0, fmt.Errorf("sampler_arg %q: want a ratio from 0 to 1", arg)
		}
		return r, nil
	}
	switch name {
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio", "parentbased_traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, err
		}
		if name == "traceidratio" {
			return sdktrace.TraceIDRatioBased(r), nil
		}
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), nil
	}
	return nil, fmt.Errorf("%q: want always_on, always_off, traceidratio or their parentbased_ forms", name)
}
