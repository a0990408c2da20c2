// Package telemetry builds the weft command's OpenTelemetry tracing from
// the standard environment, as the SDKs' autoexport does:
//
//   - OTEL_SDK_DISABLED=true turns it off;
//   - OTEL_TRACES_EXPORTER picks the exporter: none (the default: no spans
//     are made at all), otlp (OTLP over HTTP/protobuf, configured by the
//     OTEL_EXPORTER_OTLP_* variables) or console (JSON spans on a writer);
//   - OTEL_TRACES_SAMPLER(_ARG), OTEL_SERVICE_NAME and
//     OTEL_RESOURCE_ATTRIBUTES are read by the SDK.
//
// TRACEPARENT (and TRACESTATE), as W3C Trace Context, make the command's
// submissions continue that trace. The configuration file may set the
// endpoint, headers, service name and sampler too (Settings.FromFile).
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/weftrun/weft/internal/spans"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// SettingError is a setting that cannot be used: a malformed TRACEPARENT,
// an unknown exporter, protocol or sampler, bad headers. Find it with
// errors.As.
type SettingError struct{ Err error }

func (e *SettingError) Error() string { return e.Err.Error() }
func (e *SettingError) Unwrap() error { return e.Err }

func settingErrorf(format string, args ...any) error {
	return &SettingError{Err: fmt.Errorf(format, args...)}
}

// Settings are where the variables come from.
type Settings interface {
	// Env returns a variable's value: the environment's, or the
	// configuration file's where only the file sets it.
	Env(name string) string
	// FromFile reports whether the configuration file, not the
	// environment, sets the variable: the SDK reads only the environment,
	// so such a value is passed to it.
	FromFile(name string) bool
	// Show renders the value v of a variable for an error message: as
	// the configuration file writes it when the file set it, so that an
	// error names a ${file:PATH} or ${VAR} and not what it held.
	Show(name, v string) string
}

// Tracing is the command's tracer provider; the zero value (and nil) is
// tracing off.
type Tracing struct {
	provider *sdktrace.TracerProvider
	log      *slog.Logger
}

// Setup builds the tracer provider the settings ask for, and returns ctx
// carrying the trace of TRACEPARENT. console receives the console
// exporter's spans; log the failures to export. The service is named
// "weft" with version, unless OTEL_SERVICE_NAME is set.
func Setup(ctx context.Context, env Settings, version string, console io.Writer, log *slog.Logger) (context.Context, *Tracing, error) {
	if tp := env.Env("TRACEPARENT"); tp != "" {
		carrier := propagation.MapCarrier{"traceparent": tp, "tracestate": env.Env("TRACESTATE")}
		next := propagation.TraceContext{}.Extract(ctx, carrier)
		if !trace.SpanContextFromContext(next).IsValid() {
			return ctx, nil, settingErrorf("TRACEPARENT %q is not a W3C traceparent (00-<32 hex trace id>-<16 hex span id>-<2 hex flags>)", env.Show("TRACEPARENT", tp))
		}
		ctx = next
	}
	exporter, err := exporter(env, console)
	if err != nil || exporter == nil {
		return ctx, nil, err
	}
	service := "weft"
	if env.FromFile("OTEL_SERVICE_NAME") {
		service = env.Env("OTEL_SERVICE_NAME")
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service), attribute.String("service.version", version)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return ctx, nil, settingErrorf("OTEL_RESOURCE_ATTRIBUTES: %v", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exporter), sdktrace.WithResource(res), sdktrace.WithIDGenerator(spans.Generator{})}
	if env.FromFile("OTEL_TRACES_SAMPLER") || env.FromFile("OTEL_TRACES_SAMPLER_ARG") {
		s, err := sampler(env)
		if err != nil {
			return ctx, nil, settingErrorf("telemetry.sampler: %v", err)
		}
		opts = append(opts, sdktrace.WithSampler(s))
	}
	// The SDK reports export failures (a collector that is down) to
	// OpenTelemetry's process-wide error handler, which prints plain text
	// by default: log them as the command's other logs instead.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("telemetry: export failed", "error", err)
	}))
	return ctx, &Tracing{provider: sdktrace.NewTracerProvider(opts...), log: log}, nil
}

// exporter returns the exporter OTEL_TRACES_EXPORTER names, nil for none.
func exporter(env Settings, console io.Writer) (sdktrace.SpanExporter, error) {
	if strings.EqualFold(strings.TrimSpace(env.Env("OTEL_SDK_DISABLED")), "true") {
		return nil, nil
	}
	name := strings.ToLower(strings.TrimSpace(env.Env("OTEL_TRACES_EXPORTER")))
	switch name {
	case "", "none":
		return nil, nil
	case "console":
		exp, err := stdouttrace.New(stdouttrace.WithWriter(console))
		if err != nil {
			return nil, fmt.Errorf("console trace exporter: %w", err)
		}
		return exp, nil
	case "otlp":
		proto := env.Env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
		if proto == "" {
			proto = env.Env("OTEL_EXPORTER_OTLP_PROTOCOL")
		}
		if proto != "" && proto != "http/protobuf" {
			return nil, settingErrorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: weft exports OTLP over http/protobuf only", env.Show("OTEL_EXPORTER_OTLP_PROTOCOL", proto))
		}
		// The exporter reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, _HEADERS,
		// _TIMEOUT and the TLS settings itself; it connects lazily. The
		// endpoint and headers may come from the configuration file instead.
		var opts []otlptracehttp.Option
		if env.FromFile("OTEL_EXPORTER_OTLP_ENDPOINT") {
			// Checked here: the exporter would log one it cannot parse,
			// as it is, and go on without it.
			endpoint := env.Env("OTEL_EXPORTER_OTLP_ENDPOINT")
			if u, err := url.Parse(endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return nil, settingErrorf("telemetry.otlp_endpoint: %q is not an http or https URL", env.Show("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint))
			}
			// The endpoint is the collector's base URL, as
			// OTEL_EXPORTER_OTLP_ENDPOINT is: traces go to /v1/traces
			// under it (WithEndpointURL takes the full URL).
			opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimSuffix(endpoint, "/")+"/v1/traces"))
		}
		if env.FromFile("OTEL_EXPORTER_OTLP_HEADERS") {
			h, err := parseHeaders(env.Env("OTEL_EXPORTER_OTLP_HEADERS"))
			if err != nil {
				return nil, settingErrorf("telemetry.otlp_headers: %v", err)
			}
			opts = append(opts, otlptracehttp.WithHeaders(h))
		}
		exp, err := otlptracehttp.New(context.Background(), opts...)
		if err != nil {
			return nil, fmt.Errorf("otlp trace exporter: %w", err)
		}
		return exp, nil
	}
	return nil, settingErrorf("OTEL_TRACES_EXPORTER %q: want otlp, console or none", env.Show("OTEL_TRACES_EXPORTER", name))
}

// Provider returns the provider engines get; nil when tracing is off.
func (t *Tracing) Provider() trace.TracerProvider {
	if t == nil || t.provider == nil {
		return nil
	}
	return t.provider
}

// Shutdown flushes the spans not yet exported, waiting at most five
// seconds.
func (t *Tracing) Shutdown() {
	if t == nil || t.provider == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.provider.Shutdown(ctx); err != nil {
		t.log.Warn("flush traces", "error", err)
	}
	t.provider = nil
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
// values of OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (the SDK reads
// the environment itself).
func sampler(env Settings) (sdktrace.Sampler, error) {
	name, arg := env.Env("OTEL_TRACES_SAMPLER"), env.Env("OTEL_TRACES_SAMPLER_ARG")
	ratio := func() (float64, error) {
		if arg == "" {
			return 1, nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return 0, fmt.Errorf("sampler_arg %q: want a ratio from 0 to 1", env.Show("OTEL_TRACES_SAMPLER_ARG", arg))
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
	return nil, fmt.Errorf("%q: want always_on, always_off, traceidratio or their parentbased_ forms", env.Show("OTEL_TRACES_SAMPLER", name))
}
