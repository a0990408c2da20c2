package main

import (
	"context"
	"fmt"
	"strings"
	"time"

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
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "weft"), attribute.String("service.version", weft.Version)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return ctx, usageErrorf("OTEL_RESOURCE_ATTRIBUTES: %v", err)
	}
	a.tracing.provider = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	return ctx, nil
}

// traceExporter returns the exporter $OTEL_TRACES_EXPORTER names, nil for
// none.
func (a *app) traceExporter() (sdktrace.SpanExporter, error) {
	if strings.EqualFold(strings.TrimSpace(a.getenv("OTEL_SDK_DISABLED")), "true") {
		return nil, nil
	}
	name := strings.ToLower(strings.TrimSpace(a.getenv("OTEL_TRACES_EXPORTER")))
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
		proto := a.getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
		if proto == "" {
			proto = a.getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
		}
		if proto != "" && proto != "http/protobuf" {
			return nil, usageErrorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: weft exports OTLP over http/protobuf only", proto)
		}
		// The exporter reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, _HEADERS,
		// _TIMEOUT and the TLS settings itself; it connects lazily.
		exp, err := otlptracehttp.New(context.Background())
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
